#include "cc/comm/shm/wait_policy.h"

#include <cstdlib>
#include <cstring>

namespace distkit {

// The yield phase outlasts the waits of a large operation's steps (a 16 MiB
// single-copy broadcast's readers copy for ~2.5 ms): waking a sleeping rank
// costs the waker a futex call and the sleeper its virtual CPU's wake-up,
// which took that broadcast from 2.1-2.4 ms to 3.3-8 ms with 2 ms here, and a
// 4 MiB one from 0.5 to 1.35 ms with 200 us. A rank waiting 2 s yields for
// 1% of it.
absl::Duration ShmYieldPhase() {
  const char* mode = std::getenv("DISTKIT_SHM_WAIT");
  if (mode != nullptr && std::strcmp(mode, "sleep") == 0) {
    return absl::ZeroDuration();
  }
  return absl::Milliseconds(20);
}

}  // namespace distkit
