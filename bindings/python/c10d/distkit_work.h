// DistkitWork is the c10d Work of one distkit operation: it holds the
// operation's dk_work_t and the tensors lent to it, and completes from
// distkit's completion callback (dk_work_on_complete), on the group's
// worker, with no thread waiting and no Python: the results are copied
// where torch wants them (`then`), waiters wake, and the future is
// completed on the CompletionPool (its then-callbacks run there).
//
//   auto work = c10::make_intrusive<DistkitWork>(...);
//   work->Start(dk_work);     // after the operation was issued
//   work->wait();             // or isCompleted(), getFuture()->then(...)

#ifndef DISTKIT_BINDINGS_PYTHON_C10D_DISTKIT_WORK_H_
#define DISTKIT_BINDINGS_PYTHON_C10D_DISTKIT_WORK_H_

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "distkit/distkit.h"

namespace distkit {
namespace c10d_ext {

class DistkitWork : public c10d::Work {
 public:
  // `what` names the operation in errors ("distkit: allreduce on group
  // 'world' (rank 0 of 2)"); `outputs` are the future's value and result();
  // `lent` the tensors the operation reads or writes (kept alive until it
  // completes); `then` runs after the operation succeeded, before anyone
  // sees it complete (copies staged results into `outputs`).
  DistkitWork(int rank, c10d::OpType type, const char* profiling_title,
              std::string what, std::vector<at::Tensor> outputs,
              std::vector<at::Tensor> lent, std::function<void()> then);
  ~DistkitWork() override;

  // Takes `work` (the issued operation) and completes when it does. A
  // reference to this Work is held until then.
  void Start(dk_work_t* work);
  // Completes now, as if an operation had succeeded (nothing was issued).
  void CompleteNow();

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  // dk_work_on_complete's callback, on distkit's worker.
  static void OnDone(void* self, dk_status_t status);
  // Runs `then` on success, then marks this Work finished.
  void Finish(dk_status_t status);
  // The pool's half: completes the future.
  void CompleteFuture();

  const std::string what_;
  const std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> lent_;
  std::function<void()> then_;
  dk_work_t* work_ = nullptr;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace c10d_ext
}  // namespace distkit

#endif  // DISTKIT_BINDINGS_PYTHON_C10D_DISTKIT_WORK_H_
