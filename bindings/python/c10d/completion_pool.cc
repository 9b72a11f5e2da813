#include "bindings/python/c10d/completion_pool.h"

#include <chrono>
#include <thread>
#include <utility>

namespace distkit {
namespace c10d_ext {

CompletionPool& CompletionPool::Get() {
  static CompletionPool* pool = new CompletionPool();
  return *pool;
}

void CompletionPool::Post(std::function<void()> task) {
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    // Every thread busy (or none yet): another, so that a task blocked on a
    // later completion cannot hold that completion back.
    if (idle_ < static_cast<int>(tasks_.size()) && threads_ < kMaxThreads) {
      ++threads_;
      ++idle_;  // counted idle until it takes a task
      start = true;
    }
  }
  if (start) {
    std::thread([this] { Loop(); }).detach();
  } else {
    ready_.notify_one();
  }
}

int CompletionPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_;
}

bool CompletionPool::WaitIdle(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(
      lock, std::chrono::duration<double>(timeout_s),
      [this] { return tasks_.empty() && idle_ == threads_; });
}

void CompletionPool::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ready_.wait(lock, [this] { return !tasks_.empty(); });
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    --idle_;
    lock.unlock();
    task();
    task = nullptr;  // its captures (the last Work reference) go here too
    lock.lock();
    ++idle_;
    idle_cv_.notify_all();
  }
}

}  // namespace c10d_ext
}  // namespace distkit
