// The test hook's library (single_copy_test_hook.h), linked here: it
// installs its factory, and a malformed variable is ignored, not fatal.

#include "cc/comm/shm/single_copy_test_hook.h"

#include <stdlib.h>

#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(SingleCopyTestHookTest, ReadsTheVariableWhenLinked) {
  setenv("DISTKIT_SHM_TEST_COPY_HOOK", "write:0:pause:/a:/b", 1);
  EXPECT_NE(SingleCopyTestHook::Make(), nullptr);
  setenv("DISTKIT_SHM_TEST_COPY_HOOK", "write:0:pause:/a:/b:20000", 1);
  EXPECT_NE(SingleCopyTestHook::Make(), nullptr);
  setenv("DISTKIT_SHM_TEST_COPY_HOOK", "write:0:stop:/a", 1);
  EXPECT_NE(SingleCopyTestHook::Make(), nullptr);
  setenv("DISTKIT_SHM_TEST_COPY_HOOK", "read:1:fail_after:/a", 1);
  EXPECT_NE(SingleCopyTestHook::Make(), nullptr);
  setenv("DISTKIT_SHM_TEST_COPY_HOOK", "read:1:fail_after:/a:/b", 1);
  EXPECT_NE(SingleCopyTestHook::Make(), nullptr);
  unsetenv("DISTKIT_SHM_TEST_COPY_HOOK");
  EXPECT_EQ(SingleCopyTestHook::Make(), nullptr);
}

TEST(SingleCopyTestHookTest, MalformedIsIgnoredNotFatal) {
  for (const char* value :
       {"garbage", "read:x:fail_after:/a", "write:0:pause:/a",
        "write:0:pause:/a:/b:soon", "read:1:fail_after:",
        "read:1:fail_after:/a:", "write:0:stop:", "write:0:stop:/a:/b"}) {
    setenv("DISTKIT_SHM_TEST_COPY_HOOK", value, 1);
    EXPECT_EQ(SingleCopyTestHookFromEnvironment(), nullptr) << value;
  }
  unsetenv("DISTKIT_SHM_TEST_COPY_HOOK");
}

}  // namespace
}  // namespace distkit
