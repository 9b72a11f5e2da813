// The public header compiles as C++ too, and its constants match the core's
// enums (the ABI passes them through by value); calls that need no job of
// several ranks: errors, the launcher's view, a group's comm device.
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "cc/comm/work.h"
#include "cc/core/data_type.h"
#include "cc/core/reduce_op.h"
#include "distkit/distkit.h"
#include "gtest/gtest.h"
#include "testing/cc/extension_device.h"

namespace {

TEST(HeaderTest, ConstantsMatchTheCore) {
  EXPECT_EQ(DK_INVALID_ARGUMENT,
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(DK_DEADLINE_EXCEEDED,
            static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(DK_FAILED_PRECONDITION,
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(DK_UNAVAILABLE, static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(DK_UNAUTHENTICATED,
            static_cast<int>(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(DK_BFLOAT16, static_cast<int>(distkit::DataType::kBFloat16));
  EXPECT_EQ(DK_BOOL, static_cast<int>(distkit::DataType::kBool));
  EXPECT_EQ(DK_OP_BXOR, static_cast<int>(distkit::ReduceOp::kBxor));
  EXPECT_EQ(DK_OP_MEAN, static_cast<int>(distkit::ReduceOp::kMean));
  EXPECT_EQ(DK_WORK_FAILED, static_cast<int>(distkit::WorkState::kFailed));
}

TEST(HeaderTest, ConfigDefaults) {
  dk_store_config_t s;
  dk_store_config_init(&s);
  EXPECT_EQ(s.struct_size, sizeof(s));
  EXPECT_EQ(s.timeout_ms, 300000);
  dk_init_config_t c;
  dk_init_config_init(&c);
  EXPECT_STREQ(c.backend, "gloo");
  EXPECT_EQ(c.timeout_ms, 1800000);
  EXPECT_EQ(c.connect_timeout_ms, 0);  // the op timeout
}

TEST(HeaderTest, ErrorsWithoutInit) {
  dk_error_t* err = nullptr;
  EXPECT_EQ(dk_group_barrier(nullptr, nullptr, &err), DK_FAILED_PRECONDITION);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(dk_error_code(err), DK_FAILED_PRECONDITION);
  // An error object already present is left alone, not overwritten.
  dk_error_t* kept = err;
  EXPECT_EQ(dk_group_barrier(nullptr, nullptr, &err), DK_FAILED_PRECONDITION);
  EXPECT_EQ(err, kept);
  dk_error_free(err);
  dk_store_config_t bad;
  dk_store_config_init(&bad);
  dk_store_t* store = nullptr;
  err = nullptr;
  EXPECT_EQ(dk_store_connect(&bad, &store, &err), DK_INVALID_ARGUMENT);
  EXPECT_STREQ(dk_error_message(err), "config: address is NULL");
  dk_error_free(err);
}

TEST(HeaderTest, CommDeviceWithoutInit) {
  DLDevice device{kDLCUDA, 7};
  dk_error_t* err = nullptr;
  ASSERT_EQ(dk_group_comm_device(nullptr, &device, &err), DK_OK);
  EXPECT_EQ(device.device_type, kDLCPU);
  EXPECT_EQ(device.device_id, 0);
  EXPECT_EQ(dk_group_comm_device(nullptr, nullptr, &err), DK_INVALID_ARGUMENT);
  EXPECT_STREQ(dk_error_message(err), "out is NULL");
  dk_error_free(err);
}

// The launcher's view as every binding reads it: Slurm's variables, with
// the master address taken from a compressed nodelist.
TEST(HeaderTest, LauncherInfoUnderSlurm) {
  for (const char* name : {"WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                           "DISTKIT_STORE", "OMPI_COMM_WORLD_LOCAL_RANK"}) {
    unsetenv(name);
  }
  setenv("SLURM_NTASKS", "8", 1);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NTASKS_PER_NODE", "2(x4)", 1);
  setenv("SLURM_NODEID", "2", 1);
  setenv("SLURM_NODELIST", "node[01-03,07]", 1);
  EXPECT_STREQ(dk_launcher_infer(), "slurm");
  dk_launcher_info_t* info = nullptr;
  ASSERT_EQ(dk_launcher_info(nullptr, &info, nullptr), DK_OK);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->struct_size, sizeof(dk_launcher_info_t));
  EXPECT_STREQ(info->launcher, "slurm");
  EXPECT_EQ(info->rank, 5);
  EXPECT_EQ(info->world_size, 8);
  EXPECT_EQ(info->local_rank, 1);
  EXPECT_EQ(info->local_world_size, 2);
  EXPECT_EQ(info->node_rank, 2);
  EXPECT_STREQ(info->master_addr, "node01");
  EXPECT_EQ(info->master_port, 29500);
  EXPECT_STREQ(info->store_address, "node01:29500");
  EXPECT_EQ(info->hosts_store, 0);
  dk_free(info);

  setenv("SLURM_PROCID", "five", 1);
  dk_error_t* err = nullptr;
  info = nullptr;
  EXPECT_EQ(dk_launcher_info("slurm", &info, &err), DK_INVALID_ARGUMENT);
  EXPECT_EQ(info, nullptr);
  EXPECT_NE(std::string(dk_error_message(err)).find("SLURM_PROCID"),
            std::string::npos)
      << dk_error_message(err);
  dk_error_free(err);
  err = nullptr;
  EXPECT_EQ(dk_launcher_info("torchrun", &info, &err), DK_INVALID_ARGUMENT);
  EXPECT_STREQ(dk_error_message(err), "Invalid launcher type: torchrun");
  dk_error_free(err);
  err = nullptr;
  EXPECT_EQ(dk_launcher_info("", &info, &err), DK_INVALID_ARGUMENT);
  EXPECT_STREQ(dk_error_message(err), "Invalid launcher type: ");
  dk_error_free(err);
  for (const char* name :
       {"SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID",
        "SLURM_NTASKS_PER_NODE", "SLURM_NODEID", "SLURM_NODELIST"}) {
    unsetenv(name);
  }
  EXPECT_STREQ(dk_launcher_infer(), "none");
  ASSERT_EQ(dk_launcher_info(nullptr, &info, nullptr), DK_OK);
  EXPECT_STREQ(info->launcher, "none");
  EXPECT_EQ(info->world_size, 1);
  EXPECT_STREQ(info->store_address, "");
  dk_free(info);
}

// The comm device is the backend's answer, not a guess from its name: the
// test backend "ext_test" computes on ext:0 (where a name-based rule, such
// as mmengine's "nccl means cuda", says cpu).
TEST(HeaderTest, CommDeviceIsTheBackends) {
  distkit::testing::InstallXorExtensionDevice();
  dk_store_config_t sc;
  dk_store_config_init(&sc);
  sc.address = "127.0.0.1:0";
  dk_store_t* store = nullptr;
  ASSERT_EQ(dk_store_serve(&sc, &store, nullptr), DK_OK);
  dk_init_config_t ic;
  dk_init_config_init(&ic);
  ic.backend = "ext_test";
  dk_group_t* world = nullptr;
  ASSERT_EQ(dk_init_with_store(store, 0, 1, &ic, &world, nullptr), DK_OK);
  for (dk_group_t* group : {world, static_cast<dk_group_t*>(nullptr)}) {
    DLDevice device{kDLCPU, 7};
    ASSERT_EQ(dk_group_comm_device(group, &device, nullptr), DK_OK);
    EXPECT_EQ(device.device_type, kDLExtDev);
    EXPECT_EQ(device.device_id, 0);
  }
  dk_group_destroy(world);
  DLDevice device;
  dk_error_t* err = nullptr;
  EXPECT_EQ(dk_group_comm_device(world, &device, &err), DK_FAILED_PRECONDITION);
  dk_error_free(err);
  dk_shutdown();
  dk_store_destroy(store);
}

}  // namespace
