// LightMutex: a std::mutex with Abseil's thread-safety annotations, for the
// locks on an operation's way through a group (the op queue's queued work,
// the flight recorder's readers and sends/receives, the group's poison; a
// synchronous collective takes none of them).
//
// Why not absl::Mutex there: Debian builds libabsl without NDEBUG, so each
// absl::Mutex lock also updates Abseil's deadlock-detection graph, and each
// absl::Notification made and destroyed adds and removes a node in it. On
// these machines that is about 100 ns a lock (200 ns a notification) against
// 9 ns for std::mutex, and a small all_reduce took ten of them: half of its
// time (perf, tools/dkbench RESULTS.md, issue 15). absl::Mutex stays
// everywhere else: its Await and deadlock checks are worth more than its cost
// off the per-operation path.

#ifndef DISTKIT_CC_CORE_LIGHT_MUTEX_H_
#define DISTKIT_CC_CORE_LIGHT_MUTEX_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace distkit {

class ABSL_LOCKABLE LightMutex {
 public:
  LightMutex() = default;
  LightMutex(const LightMutex&) = delete;
  LightMutex& operator=(const LightMutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // For std::condition_variable (std::unique_lock over it).
  std::mutex& native() ABSL_LOCK_RETURNED(this) { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a LightMutex for a scope, like absl::MutexLock.
class ABSL_SCOPED_LOCKABLE LightMutexLock {
 public:
  explicit LightMutexLock(LightMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ~LightMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  LightMutexLock(const LightMutexLock&) = delete;
  LightMutexLock& operator=(const LightMutexLock&) = delete;

 private:
  LightMutex* const mu_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_LIGHT_MUTEX_H_
