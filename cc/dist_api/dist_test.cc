// The mmengine / modelopt API when not distributed (and at world size 1).

#include "cc/dist_api/dist.h"

#include "cc/core/device_copy.h"
#include "cc/dist_api/collect_results.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/object_collectives.h"
#include "cc/dist_api/parallel_state.h"
#include "cc/store/hash_store.h"
#include "gtest/gtest.h"

namespace distkit {
namespace dist {
namespace {

TEST(NotDistributed, TopologyAnswers) {
  EXPECT_FALSE(IsDistributed());
  EXPECT_EQ(GetDefaultGroup(), nullptr);
  EXPECT_FALSE(GetBackend().has_value());
  EXPECT_EQ(GetRank(), 0);
  EXPECT_EQ(GetWorldSize(), 1);
  EXPECT_EQ(GetDistInfo(), std::make_pair(0, 1));
  EXPECT_TRUE(IsMainProcess());
  EXPECT_TRUE(Barrier().ok());
  EXPECT_EQ(GetCommDevice(), Device::Cpu());
  EXPECT_EQ(*GetLocalGroup(), nullptr);
  EXPECT_EQ(*GetLocalRank(), 0);
  EXPECT_EQ(*GetLocalSize(), 1);
  EXPECT_EQ(MasterOnly([] { return 7; }), std::optional<int>(7));
}

TEST(NotDistributed, CollectivesAreLocal) {
  int64_t v[2] = {1, 2}, out[2] = {};
  EXPECT_TRUE(AllReduce(TensorRef(v, 2, DataType::kInt64), "MEAN").ok());
  EXPECT_EQ(v[1], 2);
  EXPECT_EQ(
      AllReduce(TensorRef(v, 2, DataType::kInt64), "avg").message(),
      "reduce op should be one of dict_keys(['sum', 'product', 'min', 'max', "
      "'band', 'bor', 'bxor']), bug got avg");
  ASSERT_TRUE(AllGather(TensorRef(v, 2, DataType::kInt64),
                        {TensorRef(out, 2, DataType::kInt64)})
                  .ok());
  EXPECT_EQ(out[1], 2);
  absl::StatusOr<int32_t> seed = SyncRandomSeed();
  ASSERT_TRUE(seed.ok());
  EXPECT_GE(*seed, 0);
  EXPECT_EQ(*AllGatherObject("x"), std::vector<std::string>{"x"});
  EXPECT_EQ(**GatherObject("y"), std::vector<std::string>{"y"});
  std::vector<std::string> objs = {"a"};
  EXPECT_TRUE(BroadcastObjectList(&objs).ok());
  EXPECT_EQ(**CollectResults({"r0", "r1", "r2"}, 2), (ResultItems{"r0", "r1"}));
  EXPECT_EQ(CollectResults({}, 1, "tpu").status().code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(CollectResults({}, 1, "gpu", "/tmp/x").status().code(),
            absl::StatusCode::kInvalidArgument);
  // A negative size is refused by name (it used to throw length_error).
  for (const char* device : {"cpu", "gpu"}) {
    absl::Status negative = CollectResults({"r0"}, -1, device).status();
    EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_NE(negative.message().find("size is -1"), absl::string_view::npos)
        << negative;
  }
}

TEST(Helpers, InterleaveRestoresDatasetOrder) {
  // 7 samples over 3 ranks, padded to 9: rank r has r, r+3, r+6.
  std::vector<ResultItems> parts = {
      {"0", "3", "6"}, {"1", "4", ""}, {"2", "5", "0"}};
  EXPECT_EQ(InterleaveParts(parts, 7),
            (ResultItems{"0", "1", "2", "3", "4", "5", "6"}));
  // Uneven lengths (zip_longest) and empty items (None) dropped.
  EXPECT_EQ(InterleaveParts({{"a", "c", "e"}, {"b"}}, 10),
            (ResultItems{"a", "b", "c", "e"}));
}

TEST(Helpers, BucketsFollowTakeTensors) {
  std::vector<float> f1(300000), f2(300000), f3(10);
  std::vector<double> d1(10);
  std::vector<TensorRef> params = {
      TensorRef(f1.data(), f1.size(), DataType::kFloat32),
      TensorRef(d1.data(), d1.size(), DataType::kFloat64),
      TensorRef(f2.data(), f2.size(), DataType::kFloat32),
      TensorRef(f3.data(), f3.size(), DataType::kFloat32)};
  // No limit: one bucket per dtype in first-seen order.
  EXPECT_EQ(TakeTensorBuckets(params, -1),
            (std::vector<std::vector<size_t>>{{0, 2, 3}, {1}}));
  // 1 MiB: each 1.2 MB float tensor fills a bucket on its own; a bucket is
  // emitted when the next tensor of its dtype would pass the limit (so f3
  // closes f2's); leftovers at the end, one per dtype.
  EXPECT_EQ(TakeTensorBuckets(params, 1),
            (std::vector<std::vector<size_t>>{{0}, {2}, {3}, {1}}));
  // 2 MiB: f1 + f2 (2.4 MB) would pass it, so f1 goes alone; f2 + f3 fit.
  EXPECT_EQ(TakeTensorBuckets(params, 2),
            (std::vector<std::vector<size_t>>{{0}, {2, 3}, {1}}));
}

TEST(Modelopt, NotInitializedGroups) {
  DistributedProcessGroup world;
  EXPECT_FALSE(world.IsInitialized());
  EXPECT_EQ(world.Rank(), -1);
  EXPECT_EQ(world.WorldSize(), -1);
  EXPECT_EQ(world.ToString(),
            "group: None, initialized: False, world size: -1");
  EXPECT_EQ(
      ParallelState().ToString(),
      "data_parallel_group: group: None, initialized: False, world size: -1, "
      "tensor_parallel_group: group: -1, initialized: False, world size: -1, "
      "expert_model_parallel_group: group: -1, initialized: False, world size: "
      "-1");
  EXPECT_EQ(*DistributedProcessGroup::GetDistSyncdObj(
                "5", {world},
                [](const std::vector<std::string>& v) { return v[0] + "!"; }),
            "5");
}

TEST(Init, BadLauncherAndSingleRankJob) {
  EXPECT_EQ(InitDist("k8s").message(), "Invalid launcher type: k8s");
  // NCCL without a GPU here (or without CUDA in the build): refused clearly.
  if (CudaDeviceCount() == 0) {
    EXPECT_EQ(InitDistWithStore(std::make_shared<HashStore>(), 0, 1,
                                {.backend = "nccl"})
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_FALSE(IsDistributed());
  ASSERT_TRUE(InitDistWithStore(std::make_shared<HashStore>(), 0, 1).ok());
  EXPECT_TRUE(IsDistributed());
  EXPECT_EQ(GetBackend(), std::optional<std::string>("gloo"));
  EXPECT_EQ(InitDistWithStore(std::make_shared<HashStore>(), 0, 1).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(GetLocalRank().status().message(),
            "Local process group is not created, please use `init_local_group` "
            "to setup "
            "local process group.");
  ASSERT_TRUE(InitLocalGroup(0, 1).ok());
  EXPECT_EQ(*GetLocalSize(), 1);
  EXPECT_EQ(InitLocalGroup(0, 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DistributedProcessGroup().ToString(),
            "group: None, initialized: True, world size: 1");
  DestroyDist();
  EXPECT_FALSE(IsDistributed());
}

// The mpi backend under another launcher reads that launcher's variables:
// init_dist('slurm', backend='mpi') without MASTER_ADDR named mpirun's
// OMPI_COMM_WORLD_RANK, which srun never sets. (Stops at the missing
// variable, before any store or MPI is started.)
TEST(Init, MpiBackendReadsTheChosenLaunchersVariables) {
  for (const char* name :
       {"MASTER_ADDR", "MASTER_PORT", "DISTKIT_STORE", "SLURM_PROCID",
        "SLURM_NTASKS", "SLURM_NODELIST", "RANK", "WORLD_SIZE", "LOCAL_RANK",
        "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    unsetenv(name);
  }
  setenv("SLURM_NTASKS", "1", 1);
  setenv("SLURM_NODELIST", "n1", 1);
  absl::Status s = InitDist("slurm", {.backend = "mpi"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("SLURM_PROCID"), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find("OMPI"), absl::string_view::npos) << s;
  unsetenv("SLURM_NTASKS");
  unsetenv("SLURM_NODELIST");
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_RANK", "0", 1);
  s = InitDist("pytorch", {.backend = "mpi"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("MASTER_ADDR"), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find("OMPI"), absl::string_view::npos) << s;
  // Under mpirun itself, MPI still finds the store (mpirun's variables).
  EXPECT_NE(LauncherInfo("mpi").status().message().find("OMPI_COMM_WORLD_RANK"),
            absl::string_view::npos);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_RANK");
  EXPECT_FALSE(IsDistributed());
}

}  // namespace
}  // namespace dist
}  // namespace distkit
