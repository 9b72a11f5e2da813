// CompletionPool runs what follows an operation's completion away from the
// group's worker: completing the torch future (whose then-callbacks, Python
// ones included, run inline) and dropping the last reference to a Work.
// Why not on the worker: a callback that issues a collective on the same
// group and waits for it would wait for the worker it occupies, and the
// last reference to a work handle may be the last one to its group, whose
// destruction joins that worker. Threads are added while every thread is
// busy (a callback that waits for another operation's future leaves the
// next completion to another thread), up to a bound; idle ones stay.

#ifndef DISTKIT_BINDINGS_PYTHON_C10D_COMPLETION_POOL_H_
#define DISTKIT_BINDINGS_PYTHON_C10D_COMPLETION_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

namespace distkit {
namespace c10d_ext {

class CompletionPool {
 public:
  // The process's pool. Never destroyed: its threads may still wait on it
  // while the interpreter exits.
  static CompletionPool& Get();

  // Runs `task` on a pool thread, in order with other tasks when a single
  // thread is free. Returns at once.
  void Post(std::function<void()> task);

  // Threads started so far (tests).
  int threads() const;

  // Waits up to `timeout_s` for every posted task to have run; true when
  // they have. Why: Python's exit waits here first (atexit), since a task
  // that drops the last reference to a tensor Python made, or runs a
  // Python callback, needs the GIL, and a thread that asks for it while
  // the interpreter finalizes is ended mid-task (std::terminate).
  bool WaitIdle(double timeout_s);

 private:
  CompletionPool() = default;
  void Loop();

  // Enough for callbacks nested a few deep on several groups at once.
  static constexpr int kMaxThreads = 32;

  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::condition_variable idle_cv_;  // a task finished
  std::deque<std::function<void()>> tasks_;
  int threads_ = 0;
  int idle_ = 0;
};

}  // namespace c10d_ext
}  // namespace distkit

#endif  // DISTKIT_BINDINGS_PYTHON_C10D_COMPLETION_POOL_H_
