#include "cc/group/op_queue.h"

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
  // Set by the worker when `op` ran there (behind queued work); plain
  // standard types, cheap to make on every call (light_mutex.h).
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;
  bool inline_run = false;
  {
    LightMutexLock lock(&mu_);
    if (queue_.empty() && !busy_) {
      busy_ = true;  // nothing ahead of us: run inline
      inline_run = true;
    } else {
      queue_.push_back([&] {
        op();
        std::lock_guard<std::mutex> l(done_mu);
        done = true;
        done_cv.notify_one();
      });
      StartWorkerLocked();
    }
  }
  if (!inline_run) {
    changed_.notify_one();
    std::unique_lock<std::mutex> l(done_mu);
    done_cv.wait(l, [&] { return done; });
    return;
  }
  op();
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
    bool queued;
    {
      LightMutexLock lock(&mu_);
      busy_ = false;
      queued = !queue_.empty();
    }
    if (queued) changed_.notify_one();
  }
}

}  // namespace distkit
