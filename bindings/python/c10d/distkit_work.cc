#include "bindings/python/c10d/distkit_work.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <thread>
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

// The references completed works left for a thread other than distkit's
// worker to drop: dropping the last one releases tensors (Python's need
// the GIL) and the work handle (which may hold the last reference to its
// group, whose destruction joins that worker).
struct Finished {
  std::mutex mu;
  std::vector<c10::intrusive_ptr<DistkitWork>> works;
};
Finished& finished = *new Finished();  // never destroyed: see CompletionPool
// Past this many, the pool drops them (nothing may issue for a while).
constexpr size_t kFinishedBatch = 16;

const c10::TypePtr& TensorListType() {
  static const c10::TypePtr type =
      c10::ListType::create(c10::TensorType::get());
  return type;
}

}  // namespace

DistkitWork::DistkitWork(int rank, c10d::OpType type,
                         const char* profiling_title, const char* op,
                         std::shared_ptr<const std::string> where,
                         std::vector<at::Tensor> outputs,
                         std::vector<at::Tensor> lent,
                         std::function<void()> then)
    : c10d::Work(rank, type, profiling_title,
                 c10::optional<std::vector<at::Tensor>>(outputs)),
      op_(op),
      where_(std::move(where)),
      outputs_(std::move(outputs)),
      lent_(std::move(lent)),
      then_(std::move(then)) {}

DistkitWork::~DistkitWork() {
  if (work_ != nullptr) Dk().dk_work_destroy(work_);
}

std::string DistkitWork::what() const {
  return std::string("distkit: ") + op_ + " " + *where_;
}

void DistkitWork::Start(dk_work_t* work) {
  work_ = work;
  // The callback's reference, dropped off distkit's worker (OnDone).
  c10::raw::intrusive_ptr::incref(this);
  dk_error_t* err = nullptr;
  if (Dk().dk_work_on_complete(work, &DistkitWork::OnDone, this, &err) !=
      DK_OK) {
    // The operation is in flight on the tensors this Work lends: they must
    // outlive it (dk_work_destroy does not cancel it), so it is waited for
    // (bounded by the group's timeout) before this Work can go.
    dk_error_t* wait_err = nullptr;
    Dk().dk_work_wait(work, -1, &wait_err);
    if (wait_err != nullptr) Dk().dk_error_free(wait_err);
    c10::raw::intrusive_ptr::decref(this);
    throw std::runtime_error(what() + ": " +
                             TakeErrorMessage(err, "dk_work_on_complete"));
  }
}

void DistkitWork::CompleteNow() {
  Finish(DK_OK);
  if (FinishedWithFuture()) {
    CompleteFuture();
    PendingFutures().fetch_sub(1);
  }
}

void DistkitWork::OnDone(void* self, dk_status_t status) {
  auto ref =
      c10::intrusive_ptr<DistkitWork>::reclaim(static_cast<DistkitWork*>(self));
  DistkitWork* const work = ref.get();
  ref->Finish(status);
  if (ref->FinishedWithFuture()) {
    // Its then-callbacks run on the pool, which drops the reference too.
    // Before the post: the pool may drop the last reference at once.
    work->handed_off_.store(true, std::memory_order_release);
    CompletionPool::Get().Post([ref = std::move(ref)]() mutable {
      ref->CompleteFuture();
      ref.reset();
      PendingFutures().fetch_sub(1);
    });
    return;
  }
  bool batch;
  {
    std::lock_guard<std::mutex> lock(finished.mu);
    finished.works.push_back(std::move(ref));
    batch = finished.works.size() == kFinishedBatch;
    // Under the lock: whoever sees it and then releases the list (wait())
    // holds a reference of its own, so `work` outlives this store.
    work->handed_off_.store(true, std::memory_order_release);
  }
  if (batch) CompletionPool::Get().Post(&DistkitWork::ReleaseFinished);
}

void DistkitWork::ReleaseFinished() {
  std::vector<c10::intrusive_ptr<DistkitWork>> done;
  {
    std::lock_guard<std::mutex> lock(finished.mu);
    if (finished.works.empty()) return;
    done.swap(finished.works);
  }
}

void DistkitWork::SettleOutputs() const {
  // What `then_` wrote into CUDA outputs (a staged result copied back, a
  // flat one unflattened) may still be queued on this thread's current
  // stream, which the caller's stream does not follow: done before the
  // Work completes.
  std::vector<c10::Device> settled;
  for (const at::Tensor& t : outputs_) {
    if (!t.defined() || !t.is_cuda()) continue;
    if (std::find(settled.begin(), settled.end(), t.device()) !=
        settled.end()) {
      continue;
    }
    settled.push_back(t.device());
    c10::impl::VirtualGuardImpl impl(t.device().type());
    impl.getStream(t.device()).synchronize();
  }
}

void DistkitWork::Finish(dk_status_t status) {
  std::exception_ptr error;
  if (status != DK_OK) {
    // The operation's own message names it, its group and rank.
    dk_error_t* err = nullptr;
    Dk().dk_work_wait(work_, 0, &err);
    error = std::make_exception_ptr(std::runtime_error(
        "distkit: " + TakeErrorMessage(err, what() + " failed")));
  } else if (then_) {
    try {
      // In inference mode, as an operation's own in-place writes are
      // outside autograd: this thread has none of the caller's grad or
      // inference mode, and a copy that autograd saw would refuse a leaf
      // that requires grad (a Parameter under no_grad) or an inference
      // tensor, or add a node to the caller's graph from another thread.
      // (Versions still count: autograd sees that the tensor changed.)
      c10::InferenceMode outside_autograd;
      then_();
      SettleOutputs();
    } catch (const std::exception& e) {
      error = std::make_exception_ptr(
          std::runtime_error(what() + ": after the operation: " + e.what()));
    }
  }
  then_ = nullptr;
  finish(error);
}

bool DistkitWork::FinishedWithFuture() {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  return future_ != nullptr;
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
    throw std::runtime_error(what() + ": not finished within " +
                             std::to_string(timeout.count()) +
                             " ms (Work.wait's timeout; it goes on)");
  }
  const std::exception_ptr error = exception_;
  lock.unlock();
  // The callback's reference, and those of works finished before, go now,
  // on the waiting thread: a synchronous call's tensors (and staged copies)
  // are then the caller's alone, freed when it drops them, not kept until
  // the next operation (a failed call's too). The hand-off follows
  // completion by microseconds.
  while (work_ != nullptr && !handed_off_.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
  ReleaseFinished();
  if (error) std::rethrow_exception(error);
  return true;
}

std::vector<at::Tensor> DistkitWork::result() {
  // As ProcessGroupGloo's: the outputs are the result once written.
  TORCH_CHECK(isCompleted(),
              "Work needs to be completed before calling result(). Should "
              "call wait() before result().");
  return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> DistkitWork::getFuture() {
  bool complete_here = false;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          TensorListType(), FutureDevices(outputs_));
      // Finished already: nobody else will complete it.
      complete_here = finished_;
      // Else the pool will, running its then-callbacks (Python's need the
      // interpreter): exit waits for it (PendingFutures).
      if (!complete_here) PendingFutures().fetch_add(1);
    }
    future = future_;
  }
  if (complete_here) CompleteFuture();
  return future;
}

std::atomic<int64_t>& DistkitWork::PendingFutures() {
  static std::atomic<int64_t>* pending = new std::atomic<int64_t>(0);
  return *pending;
}

}  // namespace c10d_ext
}  // namespace distkit
