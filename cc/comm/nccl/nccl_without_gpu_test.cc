// Without a usable GPU, asking for the nccl backend is refused with a clear
// FAILED_PRECONDITION before anything touches CUDA, never a crash. The BUILD
// target hides every GPU (CUDA_VISIBLE_DEVICES=""), so this runs the same on
// a machine that has one.
#include <memory>

#include "absl/time/time.h"
#include "cc/comm/backend_registry.h"
#include "cc/core/device_copy.h"
#include "cc/dist_api/dist.h"
#include "cc/store/hash_store.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(NcclWithoutGpu, BackendsAreRegistered) {
  EXPECT_NE(FindBackend("nccl"), nullptr);
  EXPECT_NE(FindBackend("cpu:gloo,cuda:nccl"), nullptr);
}

TEST(NcclWithoutGpu, InitIsRefusedClearly) {
  ASSERT_EQ(CudaDeviceCount(), 0)
      << "CUDA_VISIBLE_DEVICES should hide every GPU";
  dist::InitOptions options;
  options.backend = "nccl";
  options.timeout = absl::Seconds(60);
  absl::Status s =
      dist::InitDistWithStore(std::make_shared<HashStore>(), 0, 1, options);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("needs a CUDA GPU"), std::string::npos) << s;
}

}  // namespace
}  // namespace distkit
