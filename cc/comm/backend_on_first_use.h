// BackendOnFirstUse: a backend that is made when an operation first needs it,
// not when its group is made.
//
// A same-host group's collectives go through shared memory; only send / recv
// use its Gloo backend. Made eagerly, that backend looks up the host's
// interfaces and starts Gloo's event-loop thread, which wakes every 10 ms for
// the life of the group whether or not a message ever goes through it: at
// 512 ranks on two cores those wakeups were about a tenth of the machine
// during start-up (tools/dkbench/RESULTS.md). Made here on the first Get(),
// a group that never sends point to point has no such thread.
//
// Get() is safe from any thread (send and recv run on per-peer threads):
// the first caller makes the backend, the others wait for it. If making it
// fails, every Get() returns that error: the pair it was for cannot connect,
// and trying again would only make a second half-made device. Abort()
// aborts a backend already made (its operations then end as Gloo's aborted
// ones do, CANCELLED); a Get() after it that would have made one is
// CANCELLED. The making runs under the lock, so an Abort() during it waits
// for it: it makes a Gloo device and a thread, with the listen address
// chosen beforehand (a name lookup only where that address is a host name).

#ifndef DISTKIT_CC_COMM_BACKEND_ON_FIRST_USE_H_
#define DISTKIT_CC_COMM_BACKEND_ON_FIRST_USE_H_

#include <atomic>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cc/comm/backend.h"

namespace distkit {

class BackendOnFirstUse {
 public:
  using Factory = std::function<absl::StatusOr<std::unique_ptr<Backend>>()>;

  explicit BackendOnFirstUse(Factory make);

  BackendOnFirstUse(const BackendOnFirstUse&) = delete;
  BackendOnFirstUse& operator=(const BackendOnFirstUse&) = delete;

  // The backend, made by the first call; its error for every call if making
  // it failed; CANCELLED where Abort() came before it was made.
  absl::StatusOr<Backend*> Get();

  // Aborts the backend if it was made; every later Get() is refused.
  void Abort();

  // Whether the backend has been made (for tests and diagnostics).
  bool made() const { return made_.load(std::memory_order_acquire) != nullptr; }

 private:
  absl::Mutex mu_;
  Factory make_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Backend> backend_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  // backend_.get() once made: the fast path reads it without the lock.
  std::atomic<Backend*> made_{nullptr};
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_BACKEND_ON_FIRST_USE_H_
