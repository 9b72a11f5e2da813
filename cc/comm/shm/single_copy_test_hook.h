// Test-only fault injection on the single-copy path (single_copy_path.h):
// DISTKIT_SHM_TEST_COPY_HOOK in a rank's own environment, read once when
// its group is made, makes that rank's reads of or writes into one peer's
// buffer misbehave at a point the test chooses, so a multi-rank test can
// hold a copy open while another rank fails. Unset (always, outside tests)
// it costs one null check per copy.
//
//   read:<peer>:fail_after:<file>
//       this rank's reads of <peer>'s buffer fail (UNAVAILABLE) once <file>
//       exists (waiting for it at most 10 s).
//   write:<peer>:pause:<entered>:<until>
//       this rank's first write into <peer>'s buffer, inside its copy window
//       (after it said so in its header and read the peer's published
//       buffer, before the copy), creates <entered> and waits until <until>
//       exists (at most 1 s), then copies.
//
// Files, not times: the ranks are separate processes, and a test that
// orders them by events does not race a loaded machine's clock.

#ifndef DISTKIT_CC_COMM_SHM_SINGLE_COPY_TEST_HOOK_H_
#define DISTKIT_CC_COMM_SHM_SINGLE_COPY_TEST_HOOK_H_

#include <memory>
#include <string>

#include "absl/status/status.h"

namespace distkit {

class SingleCopyTestHook {
 public:
  // Null when DISTKIT_SHM_TEST_COPY_HOOK is unset or empty; a malformed
  // value is fatal (a test that means to inject a fault must not silently
  // run without it).
  static std::unique_ptr<SingleCopyTestHook> FromEnvironment();

  // Called inside the copy window of a copy with rank `peer`; an error
  // fails that copy.
  absl::Status InWindow(int peer, bool write);

 private:
  bool write_ = false;  // which copies: writes into peer_, or reads of it
  int peer_ = -1;
  bool pause_ = false;  // pause (write) or fail (read)
  std::string wait_for_;
  std::string entered_;
  bool done_ = false;  // a pause happens once
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SINGLE_COPY_TEST_HOOK_H_
