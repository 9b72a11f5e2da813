#include "cc/group/op_queue.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

namespace distkit {

OpQueue::~OpQueue() {
  // Its own worker cannot join itself (std::thread would throw from this
  // destructor): say what happened instead of an unexplained terminate.
  if (worker_.joinable() && worker_.get_id() == std::this_thread::get_id()) {
    fprintf(stderr,
            "distkit: a group was destroyed on its own worker thread (a "
            "completion callback held the last reference to it); keep a "
            "reference outside the callback\n");
    abort();
  }
  {
    LightMutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void OpQueue::StartWorkerLocked() {
  if (!worker_.joinable()) worker_ = std::thread([this] { WorkerLoop(); });
}

void OpQueue::Post(std::function<void()> op) {
  {
    LightMutexLock lock(&mu_);
    queue_.push_back(std::move(op));
    state_.fetch_or(kQueued, std::memory_order_relaxed);
    StartWorkerLocked();
  }
  changed_.notify_one();
}

void OpQueue::Run(absl::FunctionRef<void()> op) {
  // Nothing queued and nothing running: run inline, without the lock. The
  // acquire orders this op after the last one (which ended with a release).
  uint32_t idle = 0;
  if (state_.compare_exchange_strong(idle, kBusy, std::memory_order_acquire,
                                     std::memory_order_relaxed)) {
    RunThenEnd(op);
    return;
  }
  // Set by the worker when `op` ran there, behind queued work; made only
  // then (an inline run, the common case, needs none).
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  std::optional<Done> queued_run;
  {
    LightMutexLock lock(&mu_);
    // The lock keeps the queue as it is, not an inline run's swaps: the last
    // op may end, or another caller start inline, meanwhile.
    uint32_t state = state_.load(std::memory_order_relaxed);
    while (state == 0 && !state_.compare_exchange_weak(
                             state, kBusy, std::memory_order_acquire,
                             std::memory_order_relaxed)) {
    }
    if (state != 0) {
      Done& d = queued_run.emplace();
      queue_.push_back([&op, &d] {
        op();
        std::lock_guard<std::mutex> l(d.mu);
        d.done = true;
        d.cv.notify_one();
      });
      // If the op running inline ends first, its swap succeeds and the
      // worker, woken below, finds kBusy clear.
      state_.fetch_or(kQueued, std::memory_order_relaxed);
      StartWorkerLocked();
    }
  }
  if (queued_run.has_value()) {
    changed_.notify_one();
    std::unique_lock<std::mutex> l(queued_run->mu);
    queued_run->cv.wait(l, [&] { return queued_run->done; });
    return;
  }
  RunThenEnd(op);
}

void OpQueue::RunThenEnd(absl::FunctionRef<void()> op) {
  // Ends the run even if `op` throws: a queue left busy would stop every
  // later operation.
  struct Ender {
    OpQueue* queue;
    ~Ender() { queue->EndRun(); }
  } ender{this};
  op();
}

void OpQueue::EndRun() {
  // Nothing was queued meanwhile: idle again, without the lock (release:
  // the next op, wherever it runs, comes after this one).
  uint32_t busy = kBusy;
  if (state_.compare_exchange_strong(busy, 0, std::memory_order_release,
                                     std::memory_order_relaxed)) {
    return;
  }
  // Work was posted while this ran: it waits for the worker, which waits
  // for kBusy to clear (under the lock, so it cannot miss the wake-up).
  {
    LightMutexLock lock(&mu_);
    state_.fetch_and(~kBusy, std::memory_order_release);
  }
  changed_.notify_one();
}

void OpQueue::WorkerLoop() {
  while (true) {
    std::function<void()> op;
    {
      std::unique_lock<std::mutex> lock(mu_.native());
      changed_.wait(lock, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !(state_.load(std::memory_order_acquire) & kBusy) &&
               (!queue_.empty() || stopping_);
      });
      if (queue_.empty()) return;  // stopping
      op = std::move(queue_.front());
      queue_.pop_front();
      // Busy, and queued only if more is.
      state_.store(queue_.empty() ? kBusy : kBusy | kQueued,
                   std::memory_order_relaxed);
    }
    RunThenEnd(op);
  }
}

}  // namespace distkit
