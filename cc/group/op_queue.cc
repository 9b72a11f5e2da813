#include "cc/group/op_queue.h"

#include "absl/synchronization/notification.h"

namespace distkit {

OpQueue::~OpQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

void OpQueue::Post(std::function<void()> op) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(op));
  if (!worker_.joinable()) worker_ = std::thread([this] { WorkerLoop(); });
}

void OpQueue::Run(const std::function<void()>& op) {
  absl::Notification done;
  bool inline_run = false;
  {
    absl::MutexLock lock(&mu_);
    if (!queue_.empty() || busy_) {
      queue_.push_back([&] {
        op();
        done.Notify();
      });
      if (!worker_.joinable()) worker_ = std::thread([this] { WorkerLoop(); });
    } else {
      busy_ = true;  // nothing ahead of us: run inline
      inline_run = true;
    }
  }
  if (!inline_run) {
    done.WaitForNotification();
    return;
  }
  op();
  absl::MutexLock lock(&mu_);
  busy_ = false;
}

bool OpQueue::WorkerCanProceed(OpQueue* q) {
  return !q->busy_ && (!q->queue_.empty() || q->stopping_);
}

void OpQueue::WorkerLoop() {
  while (true) {
    std::function<void()> op;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&OpQueue::WorkerCanProceed, this));
      if (queue_.empty()) return;  // stopping
      op = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    op();
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

}  // namespace distkit
