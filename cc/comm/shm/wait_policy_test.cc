#include "cc/comm/shm/wait_policy.h"

#include <stdlib.h>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(WaitPolicyTest, YieldsUnlessToldToSleep) {
  unsetenv("DISTKIT_SHM_WAIT");
  EXPECT_EQ(ShmYieldPhase(), absl::Milliseconds(20));
  setenv("DISTKIT_SHM_WAIT", "yield", 1);
  EXPECT_EQ(ShmYieldPhase(), absl::Milliseconds(20));
  setenv("DISTKIT_SHM_WAIT", "sleep", 1);
  EXPECT_EQ(ShmYieldPhase(), absl::ZeroDuration());
  unsetenv("DISTKIT_SHM_WAIT");
}

}  // namespace
}  // namespace distkit
