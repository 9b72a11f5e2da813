// File: op_queue.h
//
// OpQueue runs a group's operations one at a time, in submission order, so
// that every rank issues them to the backend in the same order. Asynchronous
// operations run on a worker thread (started on first use) and overlap with
// the caller; a synchronous call made while nothing is queued runs inline on
// the caller's thread, saving the thread hand-off on the latency-critical path.

#ifndef DISTKIT_CC_GROUP_OP_QUEUE_H_
#define DISTKIT_CC_GROUP_OP_QUEUE_H_

#include <deque>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"

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

  // Runs `op` after everything submitted before it and returns when it is done.
  void Run(const std::function<void()>& op);

 private:
  void WorkerLoop();
  static bool WorkerCanProceed(OpQueue* q) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // an op is executing somewhere
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_OP_QUEUE_H_
