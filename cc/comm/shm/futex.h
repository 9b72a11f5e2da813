// Sleeping on a word of shared memory until another process changes it
// (Linux futex, not the process-private kind: the word lives in a segment
// every rank maps). A shared-memory wait spins briefly, then sleeps here, and
// the rank that publishes wakes sleepers only when there are any, so the fast
// path costs no system call and a long wait costs almost no CPU.

#ifndef DISTKIT_CC_COMM_SHM_FUTEX_H_
#define DISTKIT_CC_COMM_SHM_FUTEX_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "absl/time/time.h"

namespace distkit {

static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  sizeof(std::atomic<uint32_t>) == sizeof(uint32_t),
              "a futex word must be a plain 32-bit word");

// Sleeps while *word == expected, at most `timeout` (or until a wake, or a
// signal). Returns at once when the word already differs.
inline void FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
                      absl::Duration timeout) {
  const timespec ts = absl::ToTimespec(timeout);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected,
          &ts, nullptr, 0);
}

// Wakes every process sleeping on `word`.
inline void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_FUTEX_H_
