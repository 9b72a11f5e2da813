// ProcessGroupDistkit is torch.distributed's "distkit" backend in C++: a
// c10d::ProcessGroup (torch 1.13's extension point; a c10d::Backend under
// torch 2.x, torch_base.h) over one distkit group, reached through the C
// ABI. Every operation is issued asynchronously and
// returns at once; its DistkitWork completes from distkit's completion
// callback. So torch's DistributedDataParallel overlaps its bucket
// all_reduces with backward, and `async_op=True` returns before the data
// has moved.
//
// Ranks torch passes (root, src, dst) are the group's own, as the C ABI
// takes them. Buffers the backend makes (flat all_gather outputs, staged
// copies of non-contiguous tensors) are on the input's device, except on a
// group whose collectives compute on the host (gloo, mpi, shared memory):
// there CUDA tensors travel through host copies, as with torch's Gloo. CUDA
// operations follow the caller's current stream (the C ABI's
// dk_group_set_cuda_stream; cuda_stream.h); a completed CUDA operation's
// device work is done, so wait() leaves nothing for the caller's stream to
// wait for, and the Work holds every tensor it lent until then, so the
// caching allocator cannot hand their memory out early (what
// ProcessGroupNCCL's recordStream is for).

#ifndef DISTKIT_BINDINGS_PYTHON_C10D_PROCESS_GROUP_DISTKIT_H_
#define DISTKIT_BINDINGS_PYTHON_C10D_PROCESS_GROUP_DISTKIT_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bindings/python/c10d/torch_base.h"
#include "distkit/distkit.h"

namespace distkit {
namespace c10d_ext {

class ProcessGroupDistkit : public TorchBackendBase {
 public:
  // Over `group` (borrowed: the Python side keeps it alive; nullptr:
  // distkit's default group), this process being `rank` of `size`.
  ProcessGroupDistkit(int rank, int size, dk_group_t* group);

  const std::string getBackendName() const override { return "distkit"; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts,
                        bool wait_all_ranks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

  // The group's name in distkit ("world", "world/torch-1").
  const std::string& group_name() const { return group_name_; }

  // For tests of where buffers are made: while on, nothing reaches the
  // library; each operation records the device of every tensor it would
  // lend ("cpu", "meta", ...) and completes at once.
  void set_record_lends(bool on);
  std::vector<std::string> TakeRecordedLends();

 private:
  // Issues one operation: `call(work_out, err)` starts it on the library;
  // the Work holds `lent` until it completes and runs `then` on success.
  template <typename Call>
  c10::intrusive_ptr<c10d::Work> Issue(c10d::OpType type, const char* op,
                                       std::vector<at::Tensor> outputs,
                                       std::vector<at::Tensor> lent,
                                       std::function<void()> then, Call&& call);
  // reduce_scatter of `input` (flat; `input_is_copy`: the operation's own,
  // which PREMUL_SUM may scale in place) into `output`.
  c10::intrusive_ptr<c10d::Work> ReduceScatter(
      const char* op, c10d::OpType type, at::Tensor& output, at::Tensor input,
      bool input_is_copy, const c10d::ReduceScatterOptions& opts);
  // `t` as the library takes it: contiguous, and on the host when the
  // group computes there and `t` is a CUDA tensor (a copy; the result is
  // copied back on completion).
  at::Tensor Lendable(const at::Tensor& t) const;
  // The same for an output the operation overwrites whole: on the host, a
  // new buffer (nothing copied there).
  at::Tensor LendableOutput(const at::Tensor& t) const;
  // Options for a buffer the backend makes for `t` (its device, or the
  // host as Lendable's).
  at::TensorOptions LendOptions(const at::Tensor& t) const;
  // "distkit: <op> on group '<name>' (rank r of n)".
  std::string Describe(const char* op) const;
  [[noreturn]] void Fail(const char* op, const std::string& why) const;
  // Fails `op` unless `input` and `output` have one dtype.
  void RequireOneDtype(const char* op, const at::Tensor& input,
                       const at::Tensor& output) const;
  const at::Tensor& Single(const std::vector<at::Tensor>& tensors,
                           const char* op) const;
  // The reduction `op` asks for on `t`, applying PREMUL_SUM's factor to
  // `t` (which the caller lends in place of the input). Returns a DK_OP_*.
  dk_reduce_op_t Reduction(const c10d::ReduceOp& reduce, at::Tensor& t,
                           const char* op) const;
  // torch's c10d::checkSplitSizes for alltoall_base's `side` ("input",
  // "output"), failing with its words: `splits` (rows; empty: even) of `t`.
  void CheckSplitSizes(const std::vector<int64_t>& splits, const at::Tensor& t,
                       const char* side, const char* op) const;
  // Tells the library the caller's CUDA stream before a CUDA operation.
  void FollowCurrentStream(const at::Tensor& t, const char* op);

  dk_group_t* const group_;
  const std::string group_name_;
  // Held across "set the group's CUDA stream + issue" (Issue): the library
  // keeps one caller stream per group, and operations may come from several
  // threads. Shared by every process group over the same group handle.
  const std::shared_ptr<std::mutex> issue_mu_;
  // The group computes on the host: CUDA tensors are staged (Lendable).
  const bool host_only_;
  // "on group '<name>' (rank r of n)", which every Work names itself with.
  const std::shared_ptr<const std::string> where_;

  std::mutex record_mu_;
  bool record_lends_ = false;
  std::vector<std::string> recorded_;
};

}  // namespace c10d_ext
}  // namespace distkit

#endif  // DISTKIT_BINDINGS_PYTHON_C10D_PROCESS_GROUP_DISTKIT_H_
