// Work is the handle of one asynchronous operation: the caller tests or waits
// on it; the thread that runs the operation completes it exactly once.
//
//   std::shared_ptr<Work> w = group->AllReduceAsync(t, ReduceOp::kSum);
//   ... overlap other work ...
//   DK_RETURN_IF_ERROR(w->Wait(absl::Seconds(60)));
//
// Buffers given to an asynchronous operation are lent to it: they must stay
// valid and untouched until the Work completes.

#ifndef DISTKIT_CC_COMM_WORK_H_
#define DISTKIT_CC_COMM_WORK_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace distkit {

enum class WorkState {
  kPending = 0,
  kSucceeded = 1,
  kFailed = 2,
};

class Work {
 public:
  // `description` names the operation in messages: "all_reduce #12 on group
  // 'world'".
  explicit Work(std::string description)
      : description_(std::move(description)) {}

  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Non-blocking: whether the operation has finished (either way).
  bool Test() const;
  WorkState state() const;

  // Blocks until the operation finishes or `timeout` passes, then returns its
  // status. If it has not finished in time: DEADLINE_EXCEEDED naming the
  // operation; the operation itself goes on (abort the group to stop it).
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration()) const;

  // The final status; OK while pending.
  absl::Status status() const;

  const std::string& description() const { return description_; }

  // Marks the operation finished with `status`, then runs the completion
  // callbacks on this thread. Later calls are ignored.
  void Complete(absl::Status status);

  // Calls `fn` with the final status once the operation finishes: on the
  // thread that completes it, after waiters can see the status, or at once
  // on this thread when it has finished already. Why: a framework's
  // future (torch's c10d Work) is completed without a thread that waits.
  // `fn` runs on the group's worker, so it must be quick and must not wait
  // for the group's later operations (they run after it returns). Nor may
  // `fn` (or what it captures, destroyed on that worker right after) hold
  // the last reference to the group: a group cannot join its own worker, so
  // destroying it there aborts the process with a message saying so (the C
  // ABI's callback rule says the same of dk_group_destroy).
  void OnComplete(std::function<void(const absl::Status&)> fn);

 private:
  const std::string description_;
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(const absl::Status&)>> callbacks_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_WORK_H_
