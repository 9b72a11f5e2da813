// DistkitWork is the c10d Work of one distkit operation: it holds the
// operation's dk_work_t and the tensors lent to it, and completes from
// distkit's completion callback (dk_work_on_complete), on the group's
// worker, with no thread waiting and no Python: the results are copied
// where torch wants them (`then`), waiters wake, and a future asked for is
// completed on the CompletionPool (its then-callbacks run there). A work
// nobody asked a future of costs no thread hop: the callback's reference
// is dropped by the thread that waits for it (wait()), else by the next
// operation's issuing thread (ReleaseFinished), by the pool once a few are
// waiting, or at exit.
//
//   auto work = c10::make_intrusive<DistkitWork>(...);
//   work->Start(dk_work);     // after the operation was issued
//   work->wait();             // or isCompleted(), getFuture()->then(...)

#ifndef DISTKIT_BINDINGS_PYTHON_C10D_DISTKIT_WORK_H_
#define DISTKIT_BINDINGS_PYTHON_C10D_DISTKIT_WORK_H_

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "distkit/distkit.h"

namespace distkit {
namespace c10d_ext {

class DistkitWork : public c10d::Work {
 public:
  // `op` (a literal) and `where` ("on group 'world' (rank 0 of 2)", shared
  // by a group's works) name the operation in errors; `outputs` are the
  // future's value and result(); `lent` the tensors the operation reads or
  // writes (kept alive until it completes); `then` runs after the operation
  // succeeded, before anyone sees it complete (copies staged results into
  // `outputs`).
  DistkitWork(int rank, c10d::OpType type, const char* profiling_title,
              const char* op, std::shared_ptr<const std::string> where,
              std::vector<at::Tensor> outputs, std::vector<at::Tensor> lent,
              std::function<void()> then);
  ~DistkitWork() override;

  // Takes `work` (the issued operation) and completes when it does. A
  // reference to this Work is held until then.
  void Start(dk_work_t* work);
  // Completes now, as if an operation had succeeded (nothing was issued).
  void CompleteNow();

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Drops the references completed works left behind (see OnDone). The
  // process group calls it before each operation, on the issuing thread.
  static void ReleaseFinished();

  // "distkit: <op> <where>".
  std::string what() const;

  // Futures asked for whose operation has not completed them yet (their
  // then-callbacks still to run on the pool): exit waits for them too.
  static std::atomic<int64_t>& PendingFutures();

 private:
  // dk_work_on_complete's callback, on distkit's worker.
  static void OnDone(void* self, dk_status_t status);
  // Runs `then` on success, then marks this Work finished.
  void Finish(dk_status_t status);
  // Waits for what `then` queued on this thread's streams of the CUDA
  // outputs' devices.
  void SettleOutputs() const;
  // After Finish: whether a future was asked for (it must be completed),
  // deciding who completes one asked for later (getFuture itself).
  bool FinishedWithFuture();
  // Completes the future with the result.
  void CompleteFuture();

  const char* const op_;
  const std::shared_ptr<const std::string> where_;
  const std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> lent_;
  std::function<void()> then_;
  dk_work_t* work_ = nullptr;
  // Made on the first getFuture() (guarded by mutex_): a synchronous call
  // never asks for one.
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  bool finished_ = false;  // FinishedWithFuture ran (guarded by mutex_)
  // OnDone has passed on the callback's reference (to the finished list or
  // the pool) and no longer touches this Work.
  std::atomic<bool> handed_off_{false};
};

}  // namespace c10d_ext
}  // namespace distkit

#endif  // DISTKIT_BINDINGS_PYTHON_C10D_DISTKIT_WORK_H_
