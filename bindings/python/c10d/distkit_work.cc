#include "bindings/python/c10d/distkit_work.h"

#include <stdexcept>
#include <utility>

#include "bindings/python/c10d/completion_pool.h"
#include "bindings/python/c10d/dk_api.h"

namespace distkit {
namespace c10d_ext {
namespace {

// The devices a future must know of: those of its tensors that are not the
// CPU (a CUDA result needs its device, or markCompleted refuses it).
std::vector<c10::Device> FutureDevices(const std::vector<at::Tensor>& ts) {
  std::vector<c10::Device> devices;
  for (const at::Tensor& t : ts) {
    const c10::Device d = t.device();
    if (d.is_cpu() || d.is_meta()) continue;
    bool seen = false;
    for (const c10::Device& have : devices) seen = seen || have == d;
    if (!seen) devices.push_back(d);
  }
  return devices;
}

}  // namespace

DistkitWork::DistkitWork(int rank, c10d::OpType type,
                         const char* profiling_title, std::string what,
                         std::vector<at::Tensor> outputs,
                         std::vector<at::Tensor> lent,
                         std::function<void()> then)
    : c10d::Work(rank, type, profiling_title,
                 c10::optional<std::vector<at::Tensor>>(outputs)),
      what_(std::move(what)),
      outputs_(std::move(outputs)),
      lent_(std::move(lent)),
      then_(std::move(then)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()),
          FutureDevices(outputs_))) {}

DistkitWork::~DistkitWork() {
  if (work_ != nullptr) Dk().dk_work_destroy(work_);
}

void DistkitWork::Start(dk_work_t* work) {
  work_ = work;
  // The callback's reference: released by the pool once the future is
  // complete (never on distkit's worker; see CompletionPool).
  c10::raw::intrusive_ptr::incref(this);
  dk_error_t* err = nullptr;
  if (Dk().dk_work_on_complete(work, &DistkitWork::OnDone, this, &err) !=
      DK_OK) {
    c10::raw::intrusive_ptr::decref(this);
    throw std::runtime_error(what_ + ": " +
                             TakeErrorMessage(err, "dk_work_on_complete"));
  }
}

void DistkitWork::CompleteNow() {
  Finish(DK_OK);
  CompleteFuture();
}

void DistkitWork::OnDone(void* self, dk_status_t status) {
  auto ref = c10::intrusive_ptr<DistkitWork>::reclaim(
      static_cast<DistkitWork*>(self));
  ref->Finish(status);
  CompletionPool::Get().Post([ref = std::move(ref)]() mutable {
    ref->CompleteFuture();
    ref.reset();
  });
}

void DistkitWork::Finish(dk_status_t status) {
  std::exception_ptr error;
  if (status != DK_OK) {
    // The operation's own message names it, its group and rank.
    dk_error_t* err = nullptr;
    Dk().dk_work_wait(work_, 0, &err);
    error = std::make_exception_ptr(std::runtime_error(
        "distkit: " + TakeErrorMessage(err, what_ + " failed")));
  } else if (then_) {
    try {
      then_();
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(
          std::runtime_error(what_ + ": after the operation: " + e.what()));
    }
  }
  then_ = nullptr;
  finish(error);
}

void DistkitWork::CompleteFuture() {
  std::exception_ptr error = exception();
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool DistkitWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [this] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [this] { return completed_; })) {
    throw std::runtime_error(what_ + ": not finished within " +
                             std::to_string(timeout.count()) +
                             " ms (Work.wait's timeout; it goes on)");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

std::vector<at::Tensor> DistkitWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> DistkitWork::getFuture() {
  return future_;
}

}  // namespace c10d_ext
}  // namespace distkit
