// Backend is what a communication engine implements: data movement only.
// Every rule that must hold across ranks is kept once, above the backends, by
// the collective contract (cc/group/collective_contract.h):
// - before an operation's data moves, the ranks agree on its signature
//   (ExchangeSignatures), so a data method below is only ever called with
//   the same operation, dtype, count and root on every rank;
// - reductions arrive validated; mean arrives as sum (the contract divides)
//   unless the backend averages natively (NativeMean);
// - uneven all_to_all split matrices are checked across ranks;
// - a point-to-point message is preceded by a header the receiver checks,
//   so Send / Recv here move matching buffers;
// - buffers arrive in the forms below (e.g. an all_gather input inside its
//   output only at this rank's own part, a reduce_scatter output never
//   inside its input): the contract stages the others, on every rank alike.
// A backend re-checks none of these: what it relies on it may assert in
// debug builds only (a check that fails on one rank alone would split the
// group).
// Collectives run one at a time per group, in the same order on every rank;
// sends and receives may run beside them (their own lanes).
//
// What a status from a backend does to its group (PoisonsGroup, the one rule
// the contract and the group apply):
// - OK, INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE and
//   UNIMPLEMENTED leave the group usable. They are refusals: a backend
//   returns one only where every rank refuses alike before any data moves
//   (a reduction or device the engine lacks, a split it cannot do), so the
//   ranks stay in step for the next operation;
// - every other status poisons the group: the contract keeps the first one
//   and refuses every later call with it (so does Abort(), as CANCELLED).
//   A backend that fails once data may have moved on some rank (a copy
//   refused, a peer gone, a deadline, an abort) returns one of these
//   (UNAVAILABLE, INTERNAL, DEADLINE_EXCEEDED, CANCELLED, ...), never a
//   refusal code, even where the cause is a bad argument.
// A backend that fails in the middle of an operation must wake its peers:
// the ranks waiting for its part must end their waits soon with an error
// of their own (also poisoning), not at their deadline nor by finishing
// without it (shared memory marks the group failed, ShmBackend::FailGroup;
// a connection-based backend closes or aborts its connections). And it makes
// a stuck wait of its own return soon after Abort().
//
// Buffer conventions (element counts, not bytes; all buffers dense):
// - AllReduce / Broadcast / Reduce work in place on `data`.
// - AllGather: `output` holds size() * input.numel() elements, rank order.
// - Gather: `output` is used on `root` only (size() * input.numel()).
// - Scatter: `input` is used on `root` only (size() * output.numel()).
// - ReduceScatter: `input` holds size() * output.numel() elements.
// - AllToAll: `input_splits[r]` elements go to rank r, `output_splits[r]`
//   come from rank r; empty splits mean equal parts.

#ifndef DISTKIT_CC_COMM_BACKEND_H_
#define DISTKIT_CC_COMM_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cc/comm/op_context.h"
#include "cc/comm/op_signature.h"
#include "cc/core/device.h"
#include "cc/core/reduce_op.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// This rank's share of the operation that follows a signature exchange,
// offered so that a backend can carry small payloads inside the exchange.
struct InlinePayload {
  // Host bytes this rank contributes; nullptr when it contributes none (a
  // broadcast's non-roots) or they are not in host memory.
  const void* data = nullptr;
  // The operation's payload size: the same on every rank once the
  // signatures agree, so every rank decides alike whether it was carried.
  size_t bytes = 0;
  // The buffer the operation leaves its result in (all_reduce, broadcast:
  // the data; all_gather, reduce_scatter: the output), when in host memory:
  // a backend may publish its address with the signature.
  void* output = nullptr;
  // Each peer needs only 1/size of `data` (an all_to_all): a backend that
  // would send all of it to every peer may carry less. Set with `bytes`,
  // from the call, never from what the ranks agreed on.
  bool spread = false;
};

// Whether `status`, returned by an operation of a group, leaves the group
// unusable (the rule above): every status but OK, INVALID_ARGUMENT,
// FAILED_PRECONDITION, OUT_OF_RANGE and UNIMPLEMENTED.
bool PoisonsGroup(const absl::Status& status);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // ---- What the contract asks of a transport ------------------------------

  // Every rank's signature into `all` (rank order). It is an all-gather, so
  // no rank leaves it before every rank has entered it (a barrier). A
  // backend may carry `payload` along and complete the next data operation
  // from those copies (gloo's inline records). Default: AllGatherHost.
  // One exception: the same-host path's eager steps (DISTKIT_SHM_EAGER=1:
  // small rooted operations, cc/comm/shm/eager_exchange.h) let senders
  // return before their receivers compare calls; `all` then holds this
  // rank's own signature for the ranks it did not hear from, and the
  // backend reports calls that differ itself, later, as ABORTED (poisoning
  // the group).
  virtual absl::Status ExchangeSignatures(const OpContext& ctx,
                                          const OpSignature& mine,
                                          InlinePayload payload,
                                          absl::Span<OpSignature> all);
  // All-gathers `bytes` host bytes from every rank into `out` (size() *
  // bytes, rank order), with no agreement of its own: the contract's
  // metadata (signatures, split matrices) travel this way. Default: AllGather
  // on byte views of host memory; a backend whose data path is not host
  // memory (NCCL) stages.
  virtual absl::Status AllGatherHost(const OpContext& ctx, const void* in,
                                     size_t bytes, void* out);
  // Whether ReduceOp::kMean on `dtype` tensors on `device` reaches the
  // backend (it averages itself, e.g. ncclAvg); otherwise the contract sends
  // kSum and divides.
  virtual bool NativeMean(DataType dtype, Device device) const { return false; }
  // Reductions the engine cannot express beyond CheckReduceOpSupported's
  // rules (NCCL's bitwise ops): INVALID_ARGUMENT naming op and dtype.
  virtual absl::Status CheckReduce(ReduceOp op, DataType dtype,
                                   Device device) const;
  // Where this backend wants tensors (mmengine's get_comm_device), and
  // whether it takes a tensor on `device` at all.
  virtual Device comm_device() const { return Device::Cpu(); }
  virtual absl::Status CheckDevice(Device device) const;
  // Which of its data paths an operation on `device` tensors takes (it goes
  // into the operation's signature, so ranks on different paths disagree
  // instead of waiting in different transports): 0 for a backend with one
  // path, whatever the device (Gloo stages CUDA tensors through the host;
  // ranks may mix devices). The device dispatcher: 1 for CPU, 2 for CUDA.
  virtual int32_t PathFor(Device device) const { return 0; }

  // ---- The caller's asynchronous device work (CUDA streams) ---------------

  // The stream the caller's work on this group's device runs on (a
  // cudaStream_t; nullptr: the legacy default stream), read when an
  // operation is issued. Backends without such a device ignore it.
  virtual absl::Status SetCudaStream(void* stream) { return absl::OkStatus(); }
  // What SetCudaStream set (nullptr: the legacy default stream, or none).
  virtual void* cuda_stream() const { return nullptr; }
  // On the issuing thread, before an operation on `device` tensors is queued
  // for a worker: marks how far the caller's stream has come, so that the
  // operation follows exactly the work issued before it (not work issued
  // after it, which may itself wait for the operation). The mark reaches the
  // backend as ctx.issue_mark and comes back through ReleaseIssueMark once
  // the operation is over; nullptr when there is nothing to follow.
  virtual absl::StatusOr<void*> MarkIssue(Device device) { return nullptr; }
  virtual void ReleaseIssueMark(void* mark) {}

  // Whether the backend checks the signature agreement itself, alongside the
  // data operation that follows, instead of in a blocking exchange before it
  // (NCCL: a host round trip before every kernel costs more than most
  // kernels). The contract then calls AgreeAlongside(mine), on the
  // operation's thread, right before the data operation (not for a barrier,
  // a split or an uneven all_to_all, which still exchange first). A mismatch
  // found that way has let the operation start on every rank, so the
  // backend aborts its communication and the operation fails on every rank
  // with CheckAgreement's message as ABORTED: the group is unusable after
  // it, unlike after the blocking exchange's INVALID_ARGUMENT.
  virtual bool AgreesAlongside() const { return false; }
  virtual void AgreeAlongside(const OpSignature& mine) {}
  // Whether the blocking exchange before an `op` with `payload_bytes` of
  // payload is a step of its own that the operation does not use (nothing
  // rides along with it or is published by it), so that a benchmark may
  // leave it out to measure it (DISTKIT_BENCH_WITHOUT=agreement,
  // cc/core/bench_without.h). Must answer alike on every rank.
  virtual bool AgreementSkippable(OpCode op, size_t payload_bytes) const {
    return false;
  }

  // ---- Data movement (signatures already agree) ---------------------------

  virtual absl::Status AllReduce(const OpContext& ctx, TensorRef data,
                                 ReduceOp op) = 0;
  virtual absl::Status Broadcast(const OpContext& ctx, TensorRef data,
                                 int root) = 0;
  virtual absl::Status Reduce(const OpContext& ctx, TensorRef data, ReduceOp op,
                              int root) = 0;
  virtual absl::Status AllGather(const OpContext& ctx, TensorRef input,
                                 TensorRef output) = 0;
  virtual absl::Status Gather(const OpContext& ctx, TensorRef input,
                              TensorRef output, int root) = 0;
  virtual absl::Status Scatter(const OpContext& ctx, TensorRef input,
                               TensorRef output, int root) = 0;
  virtual absl::Status ReduceScatter(const OpContext& ctx, TensorRef input,
                                     TensorRef output, ReduceOp op) = 0;
  virtual absl::Status AllToAll(const OpContext& ctx, TensorRef input,
                                absl::Span<const int64_t> input_splits,
                                TensorRef output,
                                absl::Span<const int64_t> output_splits) = 0;

  // Point to point, in order per (peer, tag). The contract sends a small
  // host header before each message, so every backend also takes host
  // tensors here (NCCL stages them).
  virtual absl::Status Send(const OpContext& ctx, TensorRef data, int dst,
                            int tag) = 0;
  virtual absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                            int tag) = 0;

  // Makes the operation in progress (if any) return soon with an error.
  // Callable from any thread; the contract refuses every later call.
  virtual void Abort() = 0;

  // Abort, and where the transport can, close this rank's connections, so
  // that peers waiting on them fail at once ("closed by peer") instead of at
  // their timeout: a part of a composite backend that failed tells the
  // others (HierarchicalBackend: a host's failure reaches the other hosts).
  virtual void Disconnect() { Abort(); }

  // Whether an UNAVAILABLE from a lost peer (dead, or gone) says which peer.
  // NCCL's cannot (ncclRemoteError names none): for such a backend the
  // group asks the survivors who reached the operation, as after a timeout.
  virtual bool NamesLostPeers() const { return true; }

  // Whether sends and receives with different tags between one pair may run
  // at once, on threads of their own (the group then gives each tag its own
  // lane, so they are matched in any tag order, as torch's and MPI's isend /
  // irecv are). Gloo's are matched by tag; NCCL's have no tags and one
  // channel per pair and direction that one thread at a time may use, so
  // the default keeps one lane per peer and direction.
  virtual bool ConcurrentTags() const { return false; }

  // The most elements one all_to_all may send to, or take from, one peer,
  // and the most its offsets into a buffer may reach (MPI's counts and
  // displacements are ints). The contract refuses an uneven all_to_all
  // past it on every rank alike from the whole split matrix: a rank that
  // refused its own splits alone left the others in the call.
  virtual int64_t MaxAllToAllElements() const {
    return std::numeric_limits<int64_t>::max();
  }

  // Where this rank's part of an operation that failed (timed out, or ended
  // by a peer's abort) was on its device, for the group's late-rank
  // diagnosis when every rank reached the operation on the host (NCCL:
  // whether the work queued before it had finished); kUnknown where the
  // backend cannot tell. Answered once per failed operation.
  virtual DevicePlace WhereOpFailed(const OpContext& ctx) {
    return DevicePlace::kUnknown;
  }

  // Backends whose subgroups derive from the parent's connection (MPI's
  // MPI_Comm_split, NCCL's ncclCommSplit) override both: Split is collective
  // over this backend's ranks; members (`parent_ranks`, in the new group's
  // order) get a backend, the others nullptr.
  virtual bool splits_from_parent() const { return false; }
  // Whether every rank's store is the job's one store for certain, so that
  // the ranks can agree through it whether to split (ProcessGroup::NewGroup):
  // NCCL makes every communicator through it; an MPI job that mpirun started
  // without one may run on a store of each rank's own (mpi_job_store.h).
  virtual bool store_is_shared() const { return false; }
  virtual absl::StatusOr<std::unique_ptr<Backend>> Split(
      const OpContext& ctx, const std::vector<int>& parent_ranks);

  // A subgroup only its members create (torch.distributed calls a backend's
  // creator on the members alone): the members (`parent_ranks`, in the new
  // group's order) call it, the other ranks of this backend do not. A
  // backend that splits from the parent and can do this from its connection
  // overrides it (MPI: MPI_Comm_create_group, tagged from `name`, which the
  // members share); nullptr (the default) has the subgroup connect afresh
  // through the store (NCCL: a new communicator among the members).
  virtual absl::StatusOr<std::unique_ptr<Backend>> CreateAmongMembers(
      const OpContext& ctx, const std::vector<int>& parent_ranks,
      absl::string_view name);
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_BACKEND_H_
