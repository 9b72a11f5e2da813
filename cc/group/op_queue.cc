#include "cc/group/op_queue.h"

#include <optional>

namespace distkit {

OpQueue::~OpQueue() {
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
    StartWorkerLocked();
  }
  changed_.notify_one();
}

void OpQueue::Run(absl::FunctionRef<void()> op) {
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
    if (!queue_.empty() || busy_) {
      Done& d = queued_run.emplace();
      queue_.push_back([&op, &d] {
        op();
        std::lock_guard<std::mutex> l(d.mu);
        d.done = true;
        d.cv.notify_one();
      });
      StartWorkerLocked();
    } else {
      busy_ = true;  // nothing ahead of us: run inline
    }
  }
  if (queued_run.has_value()) {
    changed_.notify_one();
    std::unique_lock<std::mutex> l(queued_run->mu);
    queued_run->cv.wait(l, [&] { return queued_run->done; });
    return;
  }
  op();
  EndRun();
}

void OpQueue::EndRun() {
  bool queued;
  {
    LightMutexLock lock(&mu_);
    busy_ = false;
    queued = !queue_.empty();
  }
  // Work posted while this ran waits for the worker.
  if (queued) changed_.notify_one();
}

void OpQueue::WorkerLoop() {
  while (true) {
    std::function<void()> op;
    {
      std::unique_lock<std::mutex> lock(mu_.native());
      changed_.wait(lock, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !busy_ && (!queue_.empty() || stopping_);
      });
      if (queue_.empty()) return;  // stopping
      op = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    op();
    EndRun();
  }
}

}  // namespace distkit
