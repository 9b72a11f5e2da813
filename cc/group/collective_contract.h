// CollectiveContract is the one place where the rules that hold for every
// backend are written; the backend under it (cc/comm/backend.h) only moves
// data. For each operation it:
// - agrees on the call's signature (op, sequence number, dtype, count, root,
//   reduction) before data moves: ranks that disagree all get the same
//   INVALID_ARGUMENT naming what each rank called, and the data is untouched;
// - turns mean into sum and divides afterwards (on the data's device), unless
//   the backend averages natively;
// - checks an uneven all_to_all's split matrix across ranks;
// - sends a header before each point-to-point message, so a receive that
//   does not match what was sent is INVALID_ARGUMENT naming both sides (the
//   message is received and dropped, so the stream stays in step);
// - hands the backend only the buffer forms it may assume: an all_gather
//   input that lies in the output anywhere but at this rank's own part, and
//   a reduce_scatter output that overlaps the input, go through a staged
//   copy (host tensors), on every rank alike;
// - leaves each host bool buffer an operation writes (or works in place
//   on: broadcast's root, reduce's non-roots) holding 0 or 1 only, any
//   non-zero byte as 1, after the operation succeeds: copies carry a peer's
//   bytes as they came, a C caller may pass any byte as DK_BOOL, and a bool
//   in Rust, C++ or Go must be 0 or 1. Device (CUDA) tensors are not
//   normalised (no host pass over device memory);
// - keeps the poison and abort state: after a failure that leaves the
//   transport in an unknown state (PoisonsGroup, cc/comm/backend.h: a
//   timeout, a dead peer, an abort, an internal error) every later call
//   fails at once with one message.
//
// Operations other than Send / Recv run one at a time (the group's queue).

#ifndef DISTKIT_CC_GROUP_COLLECTIVE_CONTRACT_H_
#define DISTKIT_CC_GROUP_COLLECTIVE_CONTRACT_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cc/comm/backend.h"
#include "cc/comm/op_context.h"
#include "cc/core/light_mutex.h"
#include "cc/core/reduce_op.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

class CollectiveContract {
 public:
  // `skip_agreement`: for benchmarks only (DISTKIT_BENCH_WITHOUT=agreement),
  // leave out the signature exchange where the backend says it is a step of
  // its own (Backend::AgreementSkippable).
  explicit CollectiveContract(std::unique_ptr<Backend> backend,
                              bool skip_agreement = false);

  const Backend& backend() const { return *backend_; }
  Backend& backend() { return *backend_; }

  // Local checks, before an operation is queued: the tensor's device and the
  // reduction (CheckReduceOpSupported, then what the engine can express).
  absl::Status CheckDevice(Device device) const;
  absl::Status CheckReduce(ReduceOp op, const TensorRef& t) const;

  // ---- Poison and abort ----------------------------------------------------

  // FAILED_PRECONDITION once the group is poisoned, naming the first error.
  absl::Status Usable(const OpContext& ctx) const;
  // Returns `status`; poisons the group first when PoisonsGroup(status).
  absl::Status Record(absl::Status status);
  // Poisons the group (CANCELLED) and wakes a stuck wait in the backend.
  void Abort(absl::string_view group_name);
  // The first error that poisoned the group; OK if none.
  absl::Status AsyncError() const;

  // ---- Operations: agree, move, finish -------------------------------------

  absl::Status AllReduce(const OpContext& ctx, TensorRef data, ReduceOp op);
  absl::Status Broadcast(const OpContext& ctx, TensorRef data, int root);
  absl::Status Reduce(const OpContext& ctx, TensorRef data, ReduceOp op,
                      int root);
  absl::Status AllGather(const OpContext& ctx, TensorRef input,
                         TensorRef output);
  absl::Status Gather(const OpContext& ctx, TensorRef input, TensorRef output,
                      int root);
  absl::Status Scatter(const OpContext& ctx, TensorRef input, TensorRef output,
                       int root);
  absl::Status ReduceScatter(const OpContext& ctx, TensorRef input,
                             TensorRef output, ReduceOp op);
  // Splits are explicit (uneven) or both empty (equal parts).
  absl::Status AllToAll(const OpContext& ctx, TensorRef input,
                        absl::Span<const int64_t> input_splits,
                        TensorRef output,
                        absl::Span<const int64_t> output_splits);
  absl::Status Barrier(const OpContext& ctx);
  absl::Status Send(const OpContext& ctx, TensorRef data, int dst, int tag);
  absl::Status Recv(const OpContext& ctx, TensorRef data, int src, int tag);
  // A subgroup derived from this group's connection (Backend::Split), after
  // the ranks agree on its size.
  absl::StatusOr<std::unique_ptr<Backend>> Split(
      const OpContext& ctx, const std::vector<int>& parent_ranks);
  // A subgroup the members alone create (Backend::CreateAmongMembers); no
  // agreement over this group, whose other ranks do not take part (the new
  // group's members agree as they connect).
  absl::StatusOr<std::unique_ptr<Backend>> CreateAmongMembers(
      const OpContext& ctx, const std::vector<int>& parent_ranks,
      absl::string_view name);

  // Whether this rank's signature exchange for operation `ctx` completed:
  // every rank then reached it (a timeout's diagnosis says so). Never for a
  // data operation whose backend agrees alongside it (NCCL's collectives;
  // its barrier and object operations do exchange).
  bool SignaturesExchanged(const OpContext& ctx) const {
    return ctx.seq != 0 &&
           exchanged_seq_.load(std::memory_order_relaxed) == ctx.seq;
  }

 private:
  // Exchanges signatures and checks that they agree; or, where the backend
  // checks alongside the data operation that follows (`data_follows`),
  // hands it this rank's signature (Backend::AgreesAlongside).
  absl::Status Agree(const OpContext& ctx, const OpSignature& mine,
                     InlinePayload payload = {}, bool data_follows = true);
  // MakeSignature, with the backend's data path for `t`'s device.
  OpSignature Sign(const OpContext& ctx, OpCode op, const TensorRef* t,
                   int64_t count, int root = -1, int reduce_op = -1) const;
  // The reduction the backend runs: kSum for a mean it does not average.
  ReduceOp WireOp(ReduceOp op, const TensorRef& t) const;
  // After the backend ran WireOp(op): the mean's division, on t's device.
  absl::Status FinishMean(ReduceOp op, TensorRef t) const;
  absl::Status CheckSplitMatrix(const OpContext& ctx,
                                absl::Span<const int64_t> input_splits,
                                absl::Span<const int64_t> output_splits);

  std::unique_ptr<Backend> backend_;
  std::vector<OpSignature> signatures_;  // one per rank, reused
  // The sequence number of the last operation whose signatures this rank
  // exchanged (collectives run one at a time; read on the thread that ran
  // the operation, atomic for the diagnosis of another's).
  std::atomic<uint64_t> exchanged_seq_{0};
  const bool skip_agreement_;

  mutable LightMutex mu_;
  absl::Status poison_ ABSL_GUARDED_BY(mu_);
  // Set (release) once poison_ is: every operation asks, and a healthy
  // group answers without the lock.
  std::atomic<bool> poisoned_{false};
};

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_COLLECTIVE_CONTRACT_H_
