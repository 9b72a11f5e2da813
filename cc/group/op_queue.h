// OpQueue runs a group's operations one at a time, in submission order, so
// that every rank issues them to the backend in the same order. Asynchronous
// operations run on a worker thread (started on first use) and overlap with
// the caller; a synchronous call made while nothing is queued runs inline on
// the caller's thread, saving the thread hand-off on the latency-critical path
// (and, on that path, neither a thread nor a notification is made: only one
// light lock, twice; light_mutex.h).

#ifndef DISTKIT_CC_GROUP_OP_QUEUE_H_
#define DISTKIT_CC_GROUP_OP_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <thread>

#include "absl/functional/function_ref.h"
#include "cc/core/light_mutex.h"

namespace distkit {

class OpQueue {
 public:
  OpQueue() = default;
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;
  // Runs what is queued, then stops the worker.
  ~OpQueue();

  // Queues `op` to run after everything submitted before it. Returns at once.
  void Post(std::function<void()> op);

  // Runs `op` after everything submitted before it and returns when it is
  // done. (A FunctionRef: the caller's lambda is not copied to the heap.)
  void Run(absl::FunctionRef<void()> op);

 private:
  void WorkerLoop();
  // After an op ran on any thread: the next may start; the worker wakes for
  // work posted meanwhile.
  void EndRun() ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the worker if it is not running.
  void StartWorkerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  LightMutex mu_;
  // The worker waits on it for something to run (or the stop) with nothing
  // executing; signalled when either may have become true.
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // an op is executing somewhere
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_OP_QUEUE_H_
