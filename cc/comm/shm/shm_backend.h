// ShmBackend: the same-host path of the gloo backend (docs/shm_path.md).
// When every rank of a group runs on one host, collectives go through one
// shared-memory segment instead of TCP loopback (shm_segment.h): each rank
// owns a header (its step counter, pid and the current op's signature) and
// two data slots used in turn, and the ranks move in steps (shm_steps.h:
// write your slot, publish the step, wait for every rank's, read the
// others' slots).
// This class picks, per operation, the path every rank takes alike.
//
// The signature exchange the contract starts every operation with is one step
// through the ranks' headers (ExchangeSignatures); an all_reduce, reduce,
// broadcast or all_gather payload that fits one chunk of its path rides
// along in the slots (CarriesPayload), and so do gather's inputs, scatter's
// root input and reduce_scatter's whole inputs where they fit one slot (any
// operation's up to kSmallSlotBytes), so that operation is that one step.
// Every collective has a native path here at every size, pipelined in
// slot-sized chunks:
// - all_reduce / reduce: small buffers in one step (every rank folds every
//   slot); larger ones by slices (each rank folds 1/size of each chunk, in
//   parallel, then the reduced slices are copied out: slot_reduce.h);
// - broadcast, all_gather: one writer or every writer per chunk (a
//   broadcast's chunks, with a core per rank, start at kFirstBroadcastChunk
//   and double, so the readers start early: slot_copy.h);
// - gather, scatter, reduce_scatter, all_to_all (equal or uneven): each slot
//   cut into one region per destination (slot_exchange.h).
// Only send/recv go to the wrapped Gloo backend's data path, and that
// backend is made when the first of them needs it (BackendOnFirstUse): a
// group that never sends point to point has no Gloo thread.
//
// From kSingleCopyFromBytes, all_reduce, broadcast, all_gather,
// reduce_scatter, gather and scatter can skip the slots: each rank publishes
// its buffer's address (with the operation's signature where it can), and
// after a step the peers read or write what they need straight from or into
// it (single_copy_path.h, single_copy_collectives.h). Which op at which size
// does is measured, not assumed (shm_thresholds.h). Such an operation (and a
// signature exchange that published its buffer early) that fails returns
// through SingleCopyPath::Leave: not while a peer still copies with the
// buffer, or, where that wait ended first (its bound; after Abort(), a
// copier stopped or without a heartbeat), with the operation's own code and
// the peers that may still read or write it named in the message and the
// payload type.distkit/shm.buffer_still_in_use.
//
// A rank that fails inside an operation (a refused read or write) marks the
// group failed, so its peers' waits end with an error naming it; waits also
// end at the op's deadline, at Abort() and when a peer they wait for has
// gone (shm_steps.h, peer_liveness.h), as over TCP.
// DISTKIT_SHM=0 turns the path off.

#ifndef DISTKIT_CC_COMM_SHM_SHM_BACKEND_H_
#define DISTKIT_CC_COMM_SHM_SHM_BACKEND_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/comm/backend.h"
#include "cc/comm/backend_on_first_use.h"
#include "cc/comm/op_signature.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/comm/shm/shm_segment.h"
#include "cc/comm/shm/shm_steps.h"
#include "cc/comm/shm/single_copy_path.h"
#include "cc/store/store.h"

namespace distkit {

class ShmBackend : public Backend {
 public:
  // Makes the wrapped backend; `wrapped` says whether shared memory will
  // carry the collectives in front of it. Without shared memory it is called
  // at once, on every rank (and may be collective); wrapped, it is called on
  // a rank's first send or recv, so it must not be collective then.
  using WrappedFactory =
      std::function<absl::StatusOr<std::unique_ptr<Backend>>(bool wrapped)>;

  // Collective over `size` ranks that share this host (HostMap, the
  // caller's to check, as whether DISTKIT_SHM allows shared memory): decides
  // through `store` whether they can map one segment. If they can, returns a
  // backend that wraps make_gloo(true), made on first use; otherwise
  // make_gloo(false) itself. Every rank reaches the same decision.
  // `names` says how messages name the ranks (cc/comm/rank_names.h).
  static absl::StatusOr<std::unique_ptr<Backend>> MaybeWrap(
      std::shared_ptr<Store> store, int rank, int size,
      const WrappedFactory& make_gloo, absl::Duration timeout,
      RankNames names = RankNames());
  ~ShmBackend() override;

  // Larger groups stay on TCP: every rank's region of a slot (Exchange)
  // must hold at least a cache line.
  static constexpr int kMaxRanks = ShmLayout::kMinSlotBytes / 64;

  // The same-host path of the "gloo" backend, by that name.
  absl::string_view name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  // Sends and receives go to the Gloo backend, whose tags are slots.
  bool ConcurrentTags() const override { return true; }
  int size() const override { return size_; }

  absl::Status ExchangeSignatures(const OpContext& ctx, const OpSignature& mine,
                                  InlinePayload payload,
                                  absl::Span<OpSignature> all) override;

  absl::Status AllReduce(const OpContext& ctx, TensorRef data,
                         ReduceOp op) override;
  absl::Status Broadcast(const OpContext& ctx, TensorRef data,
                         int root) override;
  absl::Status Reduce(const OpContext& ctx, TensorRef data, ReduceOp op,
                      int root) override;
  absl::Status AllGather(const OpContext& ctx, TensorRef input,
                         TensorRef output) override;
  absl::Status Gather(const OpContext& ctx, TensorRef input, TensorRef output,
                      int root) override;
  absl::Status Scatter(const OpContext& ctx, TensorRef input, TensorRef output,
                       int root) override;
  absl::Status ReduceScatter(const OpContext& ctx, TensorRef input,
                             TensorRef output, ReduceOp op) override;
  absl::Status AllToAll(const OpContext& ctx, TensorRef input,
                        absl::Span<const int64_t> input_splits,
                        TensorRef output,
                        absl::Span<const int64_t> output_splits) override;
  // Point to point goes to the Gloo group (the slots hold collectives only).
  absl::Status Send(const OpContext& ctx, TensorRef data, int dst,
                    int tag) override;
  absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                    int tag) override;
  void Abort() override;

  // Marks the group failed by this rank, which will not arrive at the step
  // its peers wait at (a read refused, or a hierarchical group's step
  // across hosts failed): every peer's wait ends with an error naming it.
  // Returns `why`.
  absl::Status FailGroup(absl::Status why);

 private:
  ShmBackend(int rank, int size, BackendOnFirstUse::Factory make_gloo,
             std::unique_ptr<ShmMapping> mapping, RankNames names);

  const ShmLayout& layout() const { return steps_.layout(); }
  // Whether the signature exchange of `op` carries its payload of `bytes`
  // in the slots (the same answer on every rank that agrees on `op`): up to
  // kSmallSlotBytes for any op; for all_reduce and reduce up to
  // kSliceReduceFromBytes, for broadcast, all_gather and reduce_scatter up
  // to what their first chunk over the slots would hold; for gather and
  // scatter up to a slot below kSingleCopyRootedFromBytes (measured: one
  // step through the slots beats single copy's two there, 1.35-1.45x
  // OpenMPI at 64 KiB against 0.77-0.85).
  bool CarriesPayload(OpCode op, size_t bytes) const;
  // Whether the signature exchange just before carried this operation's
  // `bytes` (its payload, in the slots of inline_turn_); clears the mark.
  bool TakeInline(size_t bytes);
  // Rank r's payload of the last exchange (`bytes` in all): in its slot of
  // inline_turn_, or in its eager entry.
  const char* InlineSlot(int r, size_t bytes) const;
  // out = the rank-order fold of the payloads the last exchange carried.
  void FoldInline(ReduceFn fn, size_t bytes, size_t elem, char* out) const;
  // out = the payloads the last exchange carried, `part` bytes each, in
  // rank order (all_gather, gather's root).
  void CopyInlineParts(size_t part, char* out) const;

  const int rank_;
  const int size_;
  BackendOnFirstUse gloo_;
  std::unique_ptr<ShmMapping> mapping_;
  // Rank 0's choice, the same on every rank (ShmGroupHeader): more ranks
  // than CPUs online.
  const bool oversubscribed_;
  // Rank 0's choice too: whether small rooted operations take eager steps.
  const bool eager_;
  ShmSteps steps_;
  SingleCopyPath single_copy_;
  int inline_turn_ = 0;  // the slots the last exchange's payload is in
  uint64_t inline_eager_step_ = 0;  // or the eager step's entries (0: none)
  uint64_t chain_ = 0;         // the eager operations taken so far (ChainWith)
  size_t inline_bytes_ = 0;    // its size; 0: nothing carried
  std::vector<char> scratch_;  // a non-root's folded slice (reduce)
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SHM_BACKEND_H_
