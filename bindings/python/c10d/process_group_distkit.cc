#include "bindings/python/c10d/process_group_distkit.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "bindings/python/c10d/cuda_stream.h"
#include "bindings/python/c10d/distkit_work.h"
#include "bindings/python/c10d/dk_api.h"
#include "bindings/python/c10d/dl_view.h"

namespace distkit {
namespace c10d_ext {
namespace {

using c10d::OpType;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

std::string GroupName(dk_group_t* group) {
  const char* name = Dk().dk_group_name(group);
  return name != nullptr ? name : "world";
}

// `t` itself when contiguous, else a contiguous copy (same device).
at::Tensor Contiguous(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

// PREMUL_SUM's tensor factor (undefined when the factor is a double): torch
// 1.13 keeps a list of them (`tensor_factors`), torch 2.x one
// (`tensor_factor`); the overload that compiles is the one used.
template <typename Supplement>
auto TensorFactor(const Supplement& s, int)
    -> decltype(s.tensor_factor, at::Tensor()) {
  return s.tensor_factor;
}
template <typename Supplement>
auto TensorFactor(const Supplement& s, long)
    -> decltype(s.tensor_factors, at::Tensor()) {
  return s.tensor_factors.empty() ? at::Tensor() : s.tensor_factors[0];
}

// Whether `group`'s collectives compute on the host (gloo, mpi, shared
// memory), so CUDA tensors must travel through host copies.
bool ComputesOnHost(dk_group_t* group) {
  DLDevice device{kDLCPU, 0};
  dk_error_t* err = nullptr;
  if (Dk().dk_group_comm_device(group, &device, &err) != DK_OK) {
    Dk().dk_error_free(err);
    return false;  // the library's own error comes with the first operation
  }
  return device.device_type == kDLCPU;
}

// A copy of `from` into `to` when they are not the same tensor (a staged
// output written back).
std::function<void()> CopyBackIfStaged(const at::Tensor& to,
                                       const at::Tensor& from) {
  if (to.is_same(from)) return nullptr;
  return [to, from]() mutable { to.copy_(from.view(to.sizes())); };
}

// Every tensor of `ts` flattened into one new tensor (on their device).
at::Tensor Flatten(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (const at::Tensor& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of `flat` into `outs` (each its own shape).
void Unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& outs) {
  int64_t at = 0;
  for (at::Tensor out : outs) {
    const int64_t n = out.numel();
    out.copy_(flat.narrow(0, at, n).view(out.sizes()));
    at += n;
  }
}

// `t`'s shape as ProcessGroupGloo writes it: "(3, 2)".
std::string SizesText(const at::Tensor& t) {
  std::string text = "(";
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(t.size(d));
  }
  return text + ")";
}

// `t` as bytes, flat (contiguous: a view; else a contiguous copy's).
at::Tensor Bytes(const at::Tensor& t) {
  return Contiguous(t).reshape({-1}).view(at::kByte);
}

// The profiler's name of an operation, as ProcessGroupGloo's "gloo:...".
const char* ProfilingTitle(OpType type) {
  switch (type) {
    case OpType::BROADCAST:
      return "distkit:broadcast";
    case OpType::ALLREDUCE:
      return "distkit:all_reduce";
    case OpType::ALLREDUCE_COALESCED:
      return "distkit:all_reduce_coalesced";
    case OpType::REDUCE:
      return "distkit:reduce";
    case OpType::ALLGATHER:
      return "distkit:all_gather";
    case OpType::_ALLGATHER_BASE:
      return "distkit:_all_gather_base";
    case OpType::ALLGATHER_COALESCED:
      return "distkit:all_gather_coalesced";
    case OpType::GATHER:
      return "distkit:gather";
    case OpType::SCATTER:
      return "distkit:scatter";
    case OpType::REDUCE_SCATTER:
      return "distkit:reduce_scatter";
    case OpType::_REDUCE_SCATTER_BASE:
      return "distkit:_reduce_scatter_base";
    case OpType::ALLTOALL_BASE:
      return "distkit:all_to_all_base";
    case OpType::ALLTOALL:
      return "distkit:all_to_all";
    case OpType::BARRIER:
      return "distkit:barrier";
    case OpType::SEND:
      return "distkit:send";
    case OpType::RECV:
      return "distkit:recv";
    default:
      return "distkit:op";
  }
}

// torch's name of a reduction (for errors).
const char* ReduceOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

// The lock under which CUDA operations on the group named `name` set its
// stream and are issued: the stream is the library group's, and two handles
// can be one library group (on one node the local group is the default
// group), so the lock is per name, shared by every process group over it.
// Two groups of one name (a world made again after a destroy) share a lock:
// less concurrency, never a race. They are few and kept.
std::shared_ptr<std::mutex> IssueMutexOf(const std::string& name) {
  static std::mutex* mu = new std::mutex;
  static auto* locks =
      new std::unordered_map<std::string, std::shared_ptr<std::mutex>>;
  std::lock_guard<std::mutex> lock(*mu);
  std::shared_ptr<std::mutex>& entry = (*locks)[name];
  if (entry == nullptr) entry = std::make_shared<std::mutex>();
  return entry;
}

}  // namespace

ProcessGroupDistkit::ProcessGroupDistkit(int rank, int size, dk_group_t* group)
    : TorchBackendBase(rank, size),
      group_(group),
      group_name_(GroupName(group)),
      issue_mu_(IssueMutexOf(group_name_)),
      host_only_(ComputesOnHost(group)),
      where_(std::make_shared<const std::string>(
          "on group '" + group_name_ + "' (rank " + std::to_string(rank) +
          " of " + std::to_string(size) + ")")) {}

at::Tensor ProcessGroupDistkit::Lendable(const at::Tensor& t) const {
  if (host_only_ && t.is_cuda()) {
    // Synchronous: ordered after the caller's stream's work on `t`.
    return t.to(t.options().device(at::kCPU), /*non_blocking=*/false,
                /*copy=*/false, at::MemoryFormat::Contiguous);
  }
  return Contiguous(t);
}

at::Tensor ProcessGroupDistkit::LendableOutput(const at::Tensor& t) const {
  // Overwritten whole by the operation: nothing to copy to the host. But
  // the result is copied into `t` later, on distkit's worker, whose stream
  // does not follow the caller's: what the caller's stream still has queued
  // on `t` (a zero_(), a kernel reading its old values) finishes first, as
  // Lendable's synchronous copy makes it for inputs.
  if (host_only_ && t.is_cuda()) {
    c10::impl::VirtualGuardImpl impl(t.device().type());
    impl.getStream(t.device()).synchronize();
    return at::empty(t.sizes(), LendOptions(t));
  }
  return Contiguous(t);
}

at::TensorOptions ProcessGroupDistkit::LendOptions(const at::Tensor& t) const {
  return host_only_ && t.is_cuda() ? t.options().device(at::kCPU) : t.options();
}

std::string ProcessGroupDistkit::Describe(const char* op) const {
  return "distkit: " + std::string(op) + " " + *where_;
}

void ProcessGroupDistkit::Fail(const char* op, const std::string& why) const {
  throw std::runtime_error(Describe(op) + ": " + why);
}

void ProcessGroupDistkit::RequireOneDtype(const char* op,
                                          const at::Tensor& input,
                                          const at::Tensor& output) const {
  // Checked here, in torch's names: dtypes the library has no type for
  // travel as bytes, and its own message would call both uint8.
  if (input.scalar_type() != output.scalar_type()) {
    Fail(op, std::string("the input is ") + c10::toString(input.scalar_type()) +
                 " but the output is " + c10::toString(output.scalar_type()) +
                 ": they must have one dtype");
  }
}

const at::Tensor& ProcessGroupDistkit::Single(
    const std::vector<at::Tensor>& tensors, const char* op) const {
  if (tensors.size() != 1) {
    Fail(op, "takes one tensor per rank (one device), got " +
                 std::to_string(tensors.size()));
  }
  if (tensors[0].layout() != at::kStrided) {
    Fail(op, "takes dense tensors (got a " + c10::str(tensors[0].layout()) +
                 " one)");
  }
  return tensors[0];
}

dk_reduce_op_t ProcessGroupDistkit::Reduction(const c10d::ReduceOp& reduce,
                                              at::Tensor& t,
                                              const char* op) const {
  // Complex tensors travel as their real pairs (view_as_real), which only a
  // reduction acting on each part alone gets right; torch 1.13 guards this
  // in all_reduce only, so reduce and reduce_scatter would answer wrongly.
  if (t.is_complex() && reduce.op_ != c10d::ReduceOp::SUM &&
      reduce.op_ != c10d::ReduceOp::AVG &&
      reduce.op_ != c10d::ReduceOp::PREMUL_SUM) {
    Fail(op, std::string("cannot reduce complex tensors (") +
                 c10::toString(t.scalar_type()) + ") with ReduceOp." +
                 ReduceOpName(reduce.op_) + "; only SUM, AVG and PREMUL_SUM");
  }
  switch (reduce.op_) {
    case c10d::ReduceOp::SUM:
      return DK_OP_SUM;
    case c10d::ReduceOp::AVG:
      return DK_OP_MEAN;
    case c10d::ReduceOp::PRODUCT:
      return DK_OP_PRODUCT;
    case c10d::ReduceOp::MIN:
      return DK_OP_MIN;
    case c10d::ReduceOp::MAX:
      return DK_OP_MAX;
    case c10d::ReduceOp::BAND:
      return DK_OP_BAND;
    case c10d::ReduceOp::BOR:
      return DK_OP_BOR;
    case c10d::ReduceOp::BXOR:
      return DK_OP_BXOR;
    case c10d::ReduceOp::PREMUL_SUM: {
      // Each rank's input times the factor, then summed (NCCL's premul sum,
      // on every distkit backend).
      auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(
          reduce.supplement_.get());
      if (factor == nullptr) Fail(op, "PREMUL_SUM without its factor");
      const at::Tensor tensor_factor = TensorFactor(*factor, 0);
      if (tensor_factor.defined()) {
        t.mul_(tensor_factor.to(t.device()));
      } else {
        t.mul_(factor->double_factor);
      }
      return DK_OP_SUM;
    }
    default:
      Fail(op, "unsupported reduction " +
                   std::to_string(static_cast<int>(reduce.op_)));
  }
}

void ProcessGroupDistkit::FollowCurrentStream(const at::Tensor& t,
                                              const char* op) {
  if (!t.is_cuda()) return;
  dk_error_t* err = nullptr;
  if (Dk().dk_group_set_cuda_stream(group_, CurrentCudaStream(t.device()),
                                    &err) != DK_OK) {
    Fail(op, TakeErrorMessage(err, "dk_group_set_cuda_stream failed"));
  }
}

void ProcessGroupDistkit::set_record_lends(bool on) {
  std::lock_guard<std::mutex> lock(record_mu_);
  record_lends_ = on;
}

std::vector<std::string> ProcessGroupDistkit::TakeRecordedLends() {
  std::lock_guard<std::mutex> lock(record_mu_);
  return std::exchange(recorded_, {});
}

template <typename Call>
WorkPtr ProcessGroupDistkit::Issue(OpType type, const char* op,
                                   std::vector<at::Tensor> outputs,
                                   std::vector<at::Tensor> lent,
                                   std::function<void()> then, Call&& call) {
  // What earlier operations left to release, here rather than on
  // distkit's worker (DistkitWork::OnDone).
  DistkitWork::ReleaseFinished();
  auto work = c10::make_intrusive<DistkitWork>(
      rank_, type, ProfilingTitle(type), op, where_, std::move(outputs), lent,
      std::move(then));
  {
    std::lock_guard<std::mutex> lock(record_mu_);
    if (record_lends_) {
      for (const at::Tensor& t : lent) {
        if (t.defined()) recorded_.push_back(t.device().str());
      }
      work->CompleteNow();
      return work;
    }
  }
  // The library keeps one caller stream per group, which an operation reads
  // when issued, and sends and receives may come from several threads
  // (the C ABI's convention 13): setting the stream and issuing are one
  // step, under the group's lock, so no thread's operation is ordered after
  // another thread's stream. Held only while issuing (asynchronous: it
  // returns at once), never while the operation runs.
  std::unique_lock<std::mutex> issuing;
  for (const at::Tensor& t : lent) {
    if (t.defined() && t.is_cuda()) {
      issuing = std::unique_lock<std::mutex>(*issue_mu_);
      FollowCurrentStream(t, op);
      break;
    }
  }
  dk_work_t* dk = nullptr;
  dk_error_t* err = nullptr;
  const dk_status_t issued = call(&dk, &err);
  if (issuing.owns_lock()) issuing.unlock();
  if (issued != DK_OK) {
    // The library's message names the operation, group and rank.
    throw std::runtime_error("distkit: " +
                             TakeErrorMessage(err, Describe(op) + " failed"));
  }
  work->Start(dk);
  return work;
}

// ---- reductions
// --------------------------------------------------------------

WorkPtr ProcessGroupDistkit::allreduce(std::vector<at::Tensor>& tensors,
                                       const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  const at::Tensor& t = Single(tensors, op);
  at::Tensor buf = Lendable(t);
  // PREMUL_SUM scales a copy, written back on success: an operation
  // refused or failed leaves the caller's input as it was.
  if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM && buf.is_same(t)) {
    buf = t.clone(at::MemoryFormat::Contiguous);
  }
  const dk_reduce_op_t reduce = Reduction(opts.reduceOp, buf, op);
  at::Tensor lent = buf.is_complex() ? at::view_as_real(buf) : buf;
  return Issue(OpType::ALLREDUCE, op, {t}, {lent}, CopyBackIfStaged(t, buf),
               [&](dk_work_t** w, dk_error_t** e) {
                 DlView v(lent, DlUse::kReduce, Describe(op));
                 return Dk().dk_group_all_reduce(group_, v.get(), reduce, w, e);
               });
}

WorkPtr ProcessGroupDistkit::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  if (tensors.empty()) Fail(op, "no tensors");
  for (const at::Tensor& t : tensors) {
    if (t.scalar_type() != tensors[0].scalar_type() ||
        t.device() != tensors[0].device()) {
      Fail(op, "the tensors must share one dtype and device (got " +
                   std::string(c10::toString(t.scalar_type())) + " on " +
                   t.device().str() + " beside " +
                   c10::toString(tensors[0].scalar_type()) + " on " +
                   tensors[0].device().str() + ")");
    }
  }
  at::Tensor flat = Lendable(Flatten(tensors));
  const dk_reduce_op_t reduce = Reduction(opts.reduceOp, flat, op);
  at::Tensor lent = flat.is_complex() ? at::view_as_real(flat) : flat;
  std::vector<at::Tensor> outs = tensors;
  return Issue(
      OpType::ALLREDUCE_COALESCED, op, tensors, {lent},
      [flat, outs] { Unflatten(flat, outs); },
      [&](dk_work_t** w, dk_error_t** e) {
        DlView v(lent, DlUse::kReduce, Describe(op));
        return Dk().dk_group_all_reduce(group_, v.get(), reduce, w, e);
      });
}

WorkPtr ProcessGroupDistkit::reduce(std::vector<at::Tensor>& tensors,
                                    const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  const at::Tensor& t = Single(tensors, op);
  const bool premul = opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM;
  // PREMUL_SUM scales a copy: a rank that is not the root keeps its input.
  at::Tensor buf = Lendable(t);
  if (premul && buf.is_same(t)) buf = t.clone(at::MemoryFormat::Contiguous);
  const dk_reduce_op_t reduce = Reduction(opts.reduceOp, buf, op);
  at::Tensor lent = buf.is_complex() ? at::view_as_real(buf) : buf;
  const int root = static_cast<int>(opts.rootRank);
  std::function<void()> then;
  if (rank_ == root) then = CopyBackIfStaged(t, buf);
  return Issue(OpType::REDUCE, op, {t}, {lent}, std::move(then),
               [&](dk_work_t** w, dk_error_t** e) {
                 DlView v(lent, DlUse::kReduce, Describe(op));
                 return Dk().dk_group_reduce(group_, v.get(), reduce, root, w,
                                             e);
               });
}

WorkPtr ProcessGroupDistkit::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  const at::Tensor& out = Single(outputs, op);
  if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
    Fail(op, "takes one list of " + std::to_string(size_) + " inputs");
  }
  for (const at::Tensor& in : inputs[0]) {
    if (in.numel() != out.numel()) {
      Fail(op, "every input must have the output's " +
                   std::to_string(out.numel()) + " elements, one has " +
                   std::to_string(in.numel()));
    }
  }
  return ReduceScatter(op, OpType::REDUCE_SCATTER, const_cast<at::Tensor&>(out),
                       Flatten(inputs[0]),
                       /*input_is_copy=*/true, opts);
}

WorkPtr ProcessGroupDistkit::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  return ReduceScatter("_reduce_scatter_base", OpType::_REDUCE_SCATTER_BASE,
                       output, input, /*input_is_copy=*/false, opts);
}

WorkPtr ProcessGroupDistkit::ReduceScatter(
    const char* op, OpType type, at::Tensor& output, at::Tensor input,
    bool input_is_copy, const c10d::ReduceScatterOptions& opts) {
  RequireOneDtype(op, input, output);
  at::Tensor in = Lendable(input);
  if (opts.reduceOp.op_ == c10d::ReduceOp::PREMUL_SUM && !input_is_copy &&
      in.is_same(input)) {
    in = input.clone(at::MemoryFormat::Contiguous);  // the caller's input
  }
  const dk_reduce_op_t reduce = Reduction(opts.reduceOp, in, op);
  at::Tensor out = LendableOutput(output);
  at::Tensor in_lent = in.is_complex() ? at::view_as_real(in) : in;
  at::Tensor out_lent = out.is_complex() ? at::view_as_real(out) : out;
  return Issue(type, op, {output}, {in_lent, out_lent},
               CopyBackIfStaged(output, out),
               [&](dk_work_t** w, dk_error_t** e) {
                 DlView a(in_lent, DlUse::kReduce, Describe(op));
                 DlView b(out_lent, DlUse::kReduce, Describe(op));
                 return Dk().dk_group_reduce_scatter(group_, a.get(), b.get(),
                                                     reduce, w, e);
               });
}

// ---- data movement
// -------------------------------------------------------------

WorkPtr ProcessGroupDistkit::broadcast(std::vector<at::Tensor>& tensors,
                                       const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  const at::Tensor& t = Single(tensors, op);
  at::Tensor buf = Lendable(t);
  const int root = static_cast<int>(opts.rootRank);
  return Issue(OpType::BROADCAST, op, {t}, {buf}, CopyBackIfStaged(t, buf),
               [&](dk_work_t** w, dk_error_t** e) {
                 DlView v(buf, DlUse::kMove, Describe(op));
                 return Dk().dk_group_broadcast(group_, v.get(), root, w, e);
               });
}

WorkPtr ProcessGroupDistkit::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  const at::Tensor& t = Single(inputs, op);
  if (outputs.size() != 1) {
    Fail(op, "takes one list of " + std::to_string(size_) + " outputs");
  }
  // ProcessGroupGloo's checks, in its words: as many outputs as ranks, each
  // of the input's dtype and shape (not only its element count).
  if (static_cast<int>(outputs[0].size()) != size_) {
    Fail(op, "invalid output tensor list at index 0 (expected length " +
                 std::to_string(size_) + ", got " +
                 std::to_string(outputs[0].size()) + ")");
  }
  std::vector<at::Tensor> outs = outputs[0];
  for (size_t i = 0; i < outs.size(); ++i) {
    const at::Tensor& o = outs[i];
    if (o.scalar_type() != t.scalar_type()) {
      Fail(op, "invalid tensor type at index " + std::to_string(i) +
                   " (expected " + c10::toString(t.scalar_type()) + ", got " +
                   c10::toString(o.scalar_type()) + ")");
    }
    if (o.sizes() != t.sizes()) {
      Fail(op, "invalid tensor size at index " + std::to_string(i) +
                   " (expected " + SizesText(t) + ", got " + SizesText(o) +
                   ")");
    }
  }
  at::Tensor in = Lendable(t);
  at::Tensor flat = at::empty({size_ * t.numel()}, LendOptions(t));
  return Issue(
      OpType::ALLGATHER, op, outs, {in, flat},
      [flat, outs] { Unflatten(flat, outs); },
      [&](dk_work_t** w, dk_error_t** e) {
        DlView a(in, DlUse::kMove, Describe(op));
        DlView b(flat, DlUse::kMove, Describe(op));
        return Dk().dk_group_all_gather(group_, a.get(), b.get(), w, e);
      });
}

WorkPtr ProcessGroupDistkit::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "_allgather_base";
  RequireOneDtype(op, input, output);
  at::Tensor in = Lendable(input);
  at::Tensor out = LendableOutput(output);
  return Issue(
      OpType::_ALLGATHER_BASE, op, {output}, {in, out},
      CopyBackIfStaged(output, out), [&](dk_work_t** w, dk_error_t** e) {
        DlView a(in, DlUse::kMove, Describe(op));
        DlView b(out, DlUse::kMove, Describe(op));
        return Dk().dk_group_all_gather(group_, a.get(), b.get(), w, e);
      });
}

WorkPtr ProcessGroupDistkit::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  if (inputs.empty()) Fail(op, "no tensors");
  if (static_cast<int>(output_lists.size()) != size_) {
    Fail(op, "takes " + std::to_string(size_) + " output lists, got " +
                 std::to_string(output_lists.size()));
  }
  // Every rank's tensors travel as one buffer of bytes, so they may mix
  // dtypes.
  std::vector<at::Tensor> bytes;
  int64_t total = 0;
  for (const at::Tensor& t : inputs) {
    if (t.device() != inputs[0].device()) {
      Fail(op, "the inputs must share one device");
    }
    bytes.push_back(Bytes(Lendable(t)));
    total += bytes.back().numel();
  }
  for (const auto& list : output_lists) {
    if (list.size() != inputs.size()) {
      Fail(op, "every output list must hold one tensor per input");
    }
    for (size_t j = 0; j < list.size(); ++j) {
      if (list[j].numel() != inputs[j].numel() ||
          list[j].scalar_type() != inputs[j].scalar_type()) {
        Fail(op, "output " + std::to_string(j) + " must match input " +
                     std::to_string(j));
      }
    }
  }
  at::Tensor in = at::cat(bytes);
  at::Tensor flat = at::empty({size_ * total}, in.options());
  std::vector<at::Tensor> results;
  for (const auto& list : output_lists) {
    results.insert(results.end(), list.begin(), list.end());
  }
  std::vector<std::vector<at::Tensor>> lists = output_lists;
  auto then = [flat, lists, total] {
    for (size_t r = 0; r < lists.size(); ++r) {
      int64_t at = r * total;
      for (at::Tensor o : lists[r]) {
        const int64_t n = static_cast<int64_t>(o.numel() * o.element_size());
        at::Tensor piece = flat.narrow(0, at, n);
        if (o.is_contiguous()) {
          o.reshape({-1}).view(at::kByte).copy_(piece);
        } else {
          at::Tensor tmp = at::empty_like(o, at::MemoryFormat::Contiguous);
          tmp.reshape({-1}).view(at::kByte).copy_(piece);
          o.copy_(tmp);
        }
        at += n;
      }
    }
  };
  return Issue(OpType::ALLGATHER_COALESCED, op, results, {in, flat}, then,
               [&](dk_work_t** w, dk_error_t** e) {
                 DlView a(in, DlUse::kMove, Describe(op));
                 DlView b(flat, DlUse::kMove, Describe(op));
                 return Dk().dk_group_all_gather(group_, a.get(), b.get(), w,
                                                 e);
               });
}

WorkPtr ProcessGroupDistkit::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const char* op = "gather";
  const at::Tensor& t = Single(inputs, op);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = rank_ == root;
  std::vector<at::Tensor> outs;
  if (is_root) {
    if (outputs.size() != 1 || static_cast<int>(outputs[0].size()) != size_) {
      Fail(op,
           "the root takes one list of " + std::to_string(size_) + " outputs");
    }
    outs = outputs[0];
    for (const at::Tensor& o : outs) {
      if (o.numel() != t.numel() || o.scalar_type() != t.scalar_type()) {
        Fail(op, "every output must match the input");
      }
    }
  } else if (!outputs.empty() && !outputs[0].empty()) {
    Fail(op, "only the root takes outputs");
  }
  at::Tensor in = Lendable(t);
  at::Tensor flat =
      is_root ? at::empty({size_ * t.numel()}, LendOptions(t)) : at::Tensor();
  std::function<void()> then;
  if (is_root) then = [flat, outs] { Unflatten(flat, outs); };
  return Issue(
      OpType::GATHER, op, outs, {in, flat}, std::move(then),
      [&](dk_work_t** w, dk_error_t** e) {
        DlView a(in, DlUse::kMove, Describe(op));
        if (!is_root) {
          return Dk().dk_group_gather(group_, a.get(), nullptr, root, w, e);
        }
        DlView b(flat, DlUse::kMove, Describe(op));
        return Dk().dk_group_gather(group_, a.get(), b.get(), root, w, e);
      });
}

WorkPtr ProcessGroupDistkit::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  const at::Tensor& t = Single(outputs, op);
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = rank_ == root;
  at::Tensor flat;
  if (is_root) {
    if (inputs.size() != 1 || static_cast<int>(inputs[0].size()) != size_) {
      Fail(op,
           "the root takes one list of " + std::to_string(size_) + " inputs");
    }
    for (const at::Tensor& in : inputs[0]) {
      if (in.numel() != t.numel() || in.scalar_type() != t.scalar_type()) {
        Fail(op, "every input must match the output");
      }
    }
    flat = Lendable(Flatten(inputs[0]));
  } else if (!inputs.empty() && !inputs[0].empty()) {
    Fail(op, "only the root takes inputs");
  }
  at::Tensor out = LendableOutput(t);
  return Issue(
      OpType::SCATTER, op, {t}, {flat, out}, CopyBackIfStaged(t, out),
      [&](dk_work_t** w, dk_error_t** e) {
        DlView b(out, DlUse::kMove, Describe(op));
        if (!is_root) {
          return Dk().dk_group_scatter(group_, nullptr, b.get(), root, w, e);
        }
        DlView a(flat, DlUse::kMove, Describe(op));
        return Dk().dk_group_scatter(group_, a.get(), b.get(), root, w, e);
      });
}

void ProcessGroupDistkit::CheckSplitSizes(const std::vector<int64_t>& splits,
                                          const at::Tensor& t, const char* side,
                                          const char* op) const {
  const int64_t rows = t.size(0);  // a 0-dim tensor: IndexError, as torch's
  if (splits.empty()) {
    if (rows % size_ != 0) {
      Fail(op, "Tensor's dim 0 does not divide equally across group size (" +
                   std::string(side) + ": " + std::to_string(rows) +
                   " rows, no split sizes, " + std::to_string(size_) +
                   " ranks)");
    }
    return;
  }
  if (static_cast<int64_t>(splits.size()) != size_) {
    Fail(op, "Number of tensor splits not equal to group size (" +
                 std::string(side) + ": " + std::to_string(splits.size()) +
                 " split sizes, " + std::to_string(size_) + " ranks)");
  }
  int64_t sum = 0;
  for (int64_t s : splits) {
    if (s < 0) {
      Fail(op, std::string(side) + " split sizes must not be negative (got " +
                   std::to_string(s) + ")");
    }
    sum += s;
  }
  if (sum != rows) {
    Fail(op, "Split sizes doesn't match total dim 0 size (" +
                 std::string(side) + ": split sizes sum to " +
                 std::to_string(sum) + ", dim 0 is " + std::to_string(rows) +
                 ")");
  }
}

WorkPtr ProcessGroupDistkit::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  RequireOneDtype(op, input, output);
  const bool even = output_split_sizes.empty() && input_split_sizes.empty();
  if (!even) {
    // torch's checks (c10d::checkSplitSizes, as ProcessGroupGloo and NCCL
    // make them), with its words: splits count rows (dimension 0), one per
    // rank, summing to the tensor's rows; a side without splits divides its
    // rows evenly.
    CheckSplitSizes(input_split_sizes, input, "input", op);
    CheckSplitSizes(output_split_sizes, output, "output", op);
  }
  at::Tensor in = Lendable(input);
  at::Tensor out = LendableOutput(output);
  // torch's splits count rows; the library's count elements.
  auto elements = [&](const at::Tensor& t, const std::vector<int64_t>& rows) {
    const int64_t row = t.size(0) > 0 ? t.numel() / t.size(0) : 1;
    std::vector<int64_t> out_splits;
    if (rows.empty()) {
      out_splits.assign(size_, t.size(0) / size_ * row);
    } else {
      for (int64_t r : rows) out_splits.push_back(r * row);
    }
    return out_splits;
  };
  std::vector<int64_t> in_splits, out_splits;
  if (!even) {
    in_splits = elements(in, input_split_sizes);
    out_splits = elements(out, output_split_sizes);
  }
  return Issue(OpType::ALLTOALL_BASE, op, {output}, {in, out},
               CopyBackIfStaged(output, out),
               [&](dk_work_t** w, dk_error_t** e) {
                 DlView a(in, DlUse::kMove, Describe(op));
                 DlView b(out, DlUse::kMove, Describe(op));
                 if (even) {
                   return Dk().dk_group_all_to_all(group_, a.get(), nullptr,
                                                   b.get(), nullptr, 0, w, e);
                 }
                 for (int64_t& s : in_splits) s *= a.scale();
                 for (int64_t& s : out_splits) s *= b.scale();
                 return Dk().dk_group_all_to_all(
                     group_, a.get(), in_splits.data(), b.get(),
                     out_splits.data(), in_splits.size(), w, e);
               });
}

WorkPtr ProcessGroupDistkit::alltoall(std::vector<at::Tensor>& outputs,
                                      std::vector<at::Tensor>& inputs,
                                      const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall";
  if (static_cast<int>(inputs.size()) != size_ ||
      static_cast<int>(outputs.size()) != size_) {
    Fail(op, "takes " + std::to_string(size_) + " inputs and outputs, got " +
                 std::to_string(inputs.size()) + " and " +
                 std::to_string(outputs.size()));
  }
  at::Tensor in = Lendable(Flatten(inputs));
  int64_t total = 0;
  std::vector<int64_t> in_splits, out_splits;
  for (const at::Tensor& t : inputs) in_splits.push_back(t.numel());
  for (const at::Tensor& t : outputs) {
    out_splits.push_back(t.numel());
    total += t.numel();
  }
  at::Tensor flat = at::empty({total}, in.options());
  std::vector<at::Tensor> outs = outputs;
  return Issue(
      OpType::ALLTOALL, op, outs, {in, flat},
      [flat, outs] { Unflatten(flat, outs); },
      [&](dk_work_t** w, dk_error_t** e) {
        DlView a(in, DlUse::kMove, Describe(op));
        DlView b(flat, DlUse::kMove, Describe(op));
        for (int64_t& s : in_splits) s *= a.scale();
        for (int64_t& s : out_splits) s *= b.scale();
        return Dk().dk_group_all_to_all(group_, a.get(), in_splits.data(),
                                        b.get(), out_splits.data(),
                                        in_splits.size(), w, e);
      });
}

WorkPtr ProcessGroupDistkit::barrier(const c10d::BarrierOptions& opts) {
  return Issue(OpType::BARRIER, "barrier", {}, {}, nullptr,
               [&](dk_work_t** w, dk_error_t** e) {
                 return Dk().dk_group_barrier(group_, w, e);
               });
}

void ProcessGroupDistkit::monitoredBarrier(const c10d::BarrierOptions& opts,
                                           bool wait_all_ranks) {
  // The library's own timeout names the ranks that never arrived; a shorter
  // one given here bounds the wait.
  WorkPtr work = barrier(opts);
  work->wait(opts.timeout.count() > 0 ? opts.timeout : kNoTimeout);
}

// ---- point to point
// ----------------------------------------------------------------

WorkPtr ProcessGroupDistkit::send(std::vector<at::Tensor>& tensors, int dst,
                                  int tag) {
  const char* op = "send";
  const at::Tensor& t = Single(tensors, op);
  at::Tensor buf = Lendable(t);
  return Issue(OpType::SEND, op, {t}, {buf}, nullptr,
               [&](dk_work_t** w, dk_error_t** e) {
                 DlView v(buf, DlUse::kMove, Describe(op));
                 return Dk().dk_group_send(group_, v.get(), dst, tag, w, e);
               });
}

WorkPtr ProcessGroupDistkit::recv(std::vector<at::Tensor>& tensors, int src,
                                  int tag) {
  const char* op = "recv";
  const at::Tensor& t = Single(tensors, op);
  at::Tensor buf = LendableOutput(t);
  return Issue(OpType::RECV, op, {t}, {buf}, CopyBackIfStaged(t, buf),
               [&](dk_work_t** w, dk_error_t** e) {
                 DlView v(buf, DlUse::kMove, Describe(op));
                 return Dk().dk_group_recv(group_, v.get(), src, tag, w, e);
               });
}

WorkPtr ProcessGroupDistkit::recvAnysource(std::vector<at::Tensor>& tensors,
                                           int tag) {
  Fail("recv",
       "receiving from any source is not supported (distkit matches "
       "a receive by its source and tag); name the source rank");
}

}  // namespace c10d_ext
}  // namespace distkit
