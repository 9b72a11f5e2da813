// OpQueue runs a group's operations one at a time, in submission order, so
// that every rank issues them to the backend in the same order. Asynchronous
// operations run on a worker thread (started on first use) and overlap with
// the caller; a synchronous call made while nothing is queued runs inline on
// the caller's thread, saving the thread hand-off on the latency-critical path
// (and, on that path, neither a thread, a notification nor a lock is used:
// two compare-and-swaps on one word, against four lock operations of a mutex
// before, measured in tools/dkbench RESULTS.md, "The cost of safety, second
// pass").

#ifndef DISTKIT_CC_GROUP_OP_QUEUE_H_
#define DISTKIT_CC_GROUP_OP_QUEUE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
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

  // Nothing running and nothing queued (a snapshot: only its owner, who
  // alone can post more, may rely on it).
  bool Idle() const { return state_.load(std::memory_order_acquire) == 0; }

 private:
  void WorkerLoop();
  // After an op ran on any thread: the next may start; the worker wakes for
  // work posted meanwhile.
  void EndRun() ABSL_LOCKS_EXCLUDED(mu_);
  // op(), then EndRun(), also when op() throws.
  void RunThenEnd(absl::FunctionRef<void()> op) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts the worker if it is not running.
  void StartWorkerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // state_: kBusy while an op executes somewhere; kQueued while queue_ is
  // not empty (set and cleared under mu_, with the queue). An inline run
  // starts by swapping 0 for kBusy and ends by swapping kBusy for 0; when
  // either swap fails (work queued, or an op running), it takes the lock.
  static constexpr uint32_t kBusy = 1;
  static constexpr uint32_t kQueued = 2;

  LightMutex mu_;
  // The worker waits on it for something to run (or the stop) with nothing
  // executing; signalled when either may have become true.
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint32_t> state_{0};
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_OP_QUEUE_H_
