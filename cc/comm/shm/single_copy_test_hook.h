// Test-only fault injection on the single-copy path (single_copy_path.h),
// so a multi-rank test can hold a copy open while another rank fails.
//
// The product library (//cc/comm/shm:shm) holds only this interface and an
// empty factory slot: a user's process never reads the hook's environment
// variable, and without a hook a copy costs one null check. A test program
// that links //cc/comm/shm:single_copy_test_hook (testonly, alwayslink)
// fills the slot at static initialization with
// SingleCopyTestHookFromEnvironment: DISTKIT_SHM_TEST_COPY_HOOK in a rank's
// own environment, read once when its group is made, makes that rank's
// reads of or writes into one peer's buffer misbehave at a point the test
// chooses:
//
//   read:<peer>:fail_after:<file>[:<failed>]
//       this rank's reads of <peer>'s buffer fail (UNAVAILABLE) once <file>
//       exists (waiting for it at most 10 s), each creating <failed> if
//       named.
//   write:<peer>:pause:<entered>:<until>[:<max_ms>]
//       this rank's first write into <peer>'s buffer, inside its copy window
//       (after it said so in its header and read the peer's published
//       buffer, before the copy), creates <entered> and waits until <until>
//       exists (at most <max_ms>, default 1000), then copies.
//   write:<peer>:stop:<entered>
//       as pause, but writes this process's pid into <entered> (whole once
//       the file exists) and stops the process (SIGSTOP) until another
//       continues it (SIGCONT), then copies.
//
// Files, not times: the ranks are separate processes, and a test that
// orders them by events does not race a loaded machine's clock.

#ifndef DISTKIT_CC_COMM_SHM_SINGLE_COPY_TEST_HOOK_H_
#define DISTKIT_CC_COMM_SHM_SINGLE_COPY_TEST_HOOK_H_

#include <memory>

#include "absl/status/status.h"

namespace distkit {

class SingleCopyTestHook {
 public:
  using Factory = std::unique_ptr<SingleCopyTestHook> (*)();

  virtual ~SingleCopyTestHook() = default;

  // Called inside the copy window of a copy with rank `peer`; an error
  // fails that copy.
  virtual absl::Status InWindow(int peer, bool write) = 0;

  // The installed factory's hook for a new group; null when no factory is
  // installed (always, outside tests) or it makes none.
  static std::unique_ptr<SingleCopyTestHook> Make();
  // Installs `factory` (the test library, at static initialization).
  static void Install(Factory factory);
};

// Defined only in //cc/comm/shm:single_copy_test_hook (the factory it
// installs). Null when DISTKIT_SHM_TEST_COPY_HOOK is unset or empty; a
// malformed value is ignored with a warning on stderr (once per process),
// never fatal: the tests that set it check the fault's effect, so a typo
// fails them anyway.
std::unique_ptr<SingleCopyTestHook> SingleCopyTestHookFromEnvironment();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SINGLE_COPY_TEST_HOOK_H_
