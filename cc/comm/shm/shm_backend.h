// File: shm_backend.h
//
// ShmBackend: the same-host path of the gloo backend (DESIGN §3). When every
// rank of a group runs on one host, collectives go through one shared-memory
// segment instead of TCP loopback: each rank owns a header (its step counter,
// pid and the current op's signature) and two data slots used in turn.
// A step is: write your part into your slot, publish the step, wait until
// every rank has published it, read what you need from the others' slots.
// A waiter polls each peer's own line (no shared counter that every rank
// must modify), the line it reads next: a small operation's signature and
// payload come with the step that says they are there.
// Alternating slots per chunk makes one wait per step enough (a slot is
// written again only after every rank has published a later step, i.e.
// finished reading it).
//
// The signature exchange the contract starts every operation with is one step
// through the ranks' headers (ExchangeSignatures); an all_reduce, reduce,
// broadcast or all_gather payload that fits one chunk of its path rides
// along in the slots (CarriesPayload), so that operation is that one step.
// Every collective has a native path here at every size, pipelined in
// slot-sized chunks:
// - all_reduce / reduce: small buffers in one step (every rank folds every
//   slot); larger ones by slices (each rank folds 1/size of each chunk, in
//   parallel, then the reduced slices are copied out: ReduceBySlices);
// - broadcast, all_gather: one writer or every writer per chunk (a
//   broadcast's chunks, with a core per rank, start at kFirstBroadcastChunk
//   and double, so the readers start early);
// - gather, scatter, reduce_scatter, all_to_all (equal or uneven): each slot
//   cut into one region per destination (Exchange).
// Only send/recv go to the wrapped Gloo backend's data path.
//
// From kSingleCopyFromBytes, all_reduce, broadcast, all_gather,
// reduce_scatter, gather and scatter can skip the slots: each rank publishes
// its buffer's address (with the operation's signature where it can), and
// after a step the peers read or write what they need
// straight from or into it (single_copy.h): an all_reduce's rank folds its
// slice from every peer's buffer and writes the result into theirs, an
// all_gather's rank writes its part into every peer's output, a broadcast's
// root writes the first 1/size of its buffer into the readers' while they
// read the rest, a gather's ranks write into the root's output and a
// scatter's read from its input; a last step keeps every buffer in place
// until all are done. Which op at which size does is measured, not assumed
// (PrefersSingleCopy): with more ranks than the host has cores, only a
// large all_reduce, gather or scatter. DISTKIT_SHM_SINGLE_COPY=1 (in rank 0's
// environment) takes it for every such op from kSingleCopyFromBytes, =0 (any
// rank's) for none. The group probes once whether the kernel allows it
// (a read and a write). A rank whose read or write fails marks the group
// failed, so its peers' waits end with an error naming it instead of running
// to the deadline or finishing without it.
//
// Waiting spins briefly, then yields (ranks may share cores) for up to 20 ms,
// then sleeps on a futex the last arrival wakes, and checks the op's deadline
// (DEADLINE_EXCEEDED), Abort() (CANCELLED) and whether the ranks it waits
// for are still alive (UNAVAILABLE, peer_liveness.h: exited, a zombie, or no
// heartbeat), as over TCP. A peer that exits after publishing the step
// waited for is not a failure.
// DISTKIT_SHM=0 turns the path off.

#ifndef DISTKIT_CC_COMM_SHM_SHM_BACKEND_H_
#define DISTKIT_CC_COMM_SHM_SHM_BACKEND_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cc/comm/backend.h"
#include "cc/comm/op_signature.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/comm/shm/peer_liveness.h"
#include "cc/store/store.h"

namespace distkit {

class ShmBackend : public Backend {
 public:
  // Makes the wrapped backend (collective); `wrapped` says whether shared
  // memory will carry the collectives in front of it.
  using WrappedFactory =
      std::function<absl::StatusOr<std::unique_ptr<Backend>>(bool wrapped)>;

  // Collective over `size` ranks that share this host (HostMap, the
  // caller's to check): decides through `store` whether they can map one
  // segment (and DISTKIT_SHM is not 0). If they can, returns a backend that
  // wraps make_gloo(true); otherwise make_gloo(false) itself. Every rank
  // reaches the same decision.
  static absl::StatusOr<std::unique_ptr<Backend>> MaybeWrap(
      std::shared_ptr<Store> store, int rank, int size,
      const WrappedFactory& make_gloo, absl::Duration timeout);
  ~ShmBackend() override;

  // Bytes of one data slot (a chunk of a pipelined operation) in groups of
  // up to kFullSlotRanks ranks; larger groups get smaller slots, so that the
  // segment (two slots per rank) stays within kSlotBudgetBytes.
  static constexpr size_t kMaxSlotBytes = size_t{1} << 20;
  static constexpr size_t kMinSlotBytes = size_t{64} << 10;
  static constexpr size_t kSlotBudgetBytes = size_t{256} << 20;
  // A step whose slot holds at most this much uses a packed slot instead,
  // in the rank's header beside its signature: the headers share a few
  // pages, so a small collective touches O(N) bytes of the segment per rank,
  // not N pages, and a tiny payload travels in the signature's cache line.
  static constexpr size_t kSmallSlotBytes = 256;
  static size_t SlotBytesFor(int size);
  // all_reduce and reduce of more than this many bytes go by slices.
  // A broadcast over the slots sends its first chunk of this size, and
  // each next one twice the last, up to a slot (a core per rank).
  static constexpr size_t kFirstBroadcastChunk = size_t{64} << 10;
  static constexpr size_t kSliceReduceFromBytes = size_t{16} << 10;
  static_assert(kSliceReduceFromBytes <= kMinSlotBytes, "one step, one slot");
  // all_reduce, broadcast, all_gather and reduce_scatter of at least this
  // many bytes (the larger buffer) read peers' buffers directly
  // (single_copy.h) where the kernel allows it; peers are folded in pieces
  // of kFoldPieceBytes (two in cache at a time).
  static constexpr size_t kSingleCopyFromBytes = size_t{64} << 10;
  static constexpr size_t kFoldPieceBytes = size_t{128} << 10;
  // With more ranks than cores, an all_reduce takes single copy from here
  // (with a core per rank, from past kSliceReduceFromBytes).
  static constexpr size_t kSingleCopyAllReduceFromBytes = size_t{1} << 20;
  // ... and a gather or scatter from here.
  static constexpr size_t kSingleCopyRootedFromBytes = size_t{256} << 10;
  // Larger groups stay on TCP: every rank's region of a slot (Exchange)
  // must hold at least a cache line.
  static constexpr int kMaxRanks = kMinSlotBytes / 64;

  absl::string_view name() const override { return gloo_->name(); }
  int rank() const override { return rank_; }
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
  absl::Status Send(const OpContext& ctx, TensorRef data, int dst,
                    int tag) override {
    return gloo_->Send(ctx, data, dst, tag);
  }
  absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                    int tag) override {
    return gloo_->Recv(ctx, data, src, tag);
  }
  void Abort() override;

  // Marks the group failed by this rank, which will not arrive at the step
  // its peers wait at (a read refused, or a hierarchical group's step
  // across hosts failed): every peer's wait ends with an error naming it.
  // Returns `why`.
  absl::Status FailGroup(absl::Status why);

 private:
  struct GroupHeader;
  struct Header;
  ShmBackend(int rank, int size, std::unique_ptr<Backend> gloo, void* base,
             size_t bytes);

  // What one rank sends each rank and receives from each rank in an
  // Exchange, as byte ranges of its buffers (empty: none at all).
  struct Pieces {
    size_t most = 0;  // the largest piece any pair moves (same on all ranks)
    size_t elem = 1;
    const char* send = nullptr;
    std::vector<size_t> send_off, send_len;  // by destination
    char* recv = nullptr;
    std::vector<size_t> recv_off, recv_len;  // by source
    // Set: every source's piece is folded (in rank order) into recv at
    // offset 0, the same length from every source (reduce_scatter).
    ReduceFn fn = nullptr;
  };

  GroupHeader* group_header() const;
  Header* header(int r) const;
  // Rank r's slot of this turn, for a chunk whose slots hold `bytes` (the
  // same on every rank): a packed small slot, or a full one.
  char* slot(int r, size_t bytes) const { return slot(r, bytes, turn_); }
  char* slot(int r, size_t bytes, int turn) const;
  // Whether the signature exchange of `op` carries its payload of `bytes`
  // in the slots (the same answer on every rank that agrees on `op`): up to
  // kSmallSlotBytes for any op; for all_reduce and reduce up to
  // kSliceReduceFromBytes, for broadcast and all_gather up to what their
  // first chunk over the slots would hold.
  bool CarriesPayload(OpCode op, size_t bytes) const;
  // Whether the signature exchange just before carried this operation's
  // `bytes` (its payload, in the slots of inline_turn_); clears the mark.
  bool TakeInline(size_t bytes);
  // Publishes this rank's next step (after its slot is written) and waits
  // until every rank has published it.
  absl::Status Step(const OpContext& ctx);
  // Whether rank r has published `step`: the copy in this turn's line (the
  // one cache line a waiter polls), and if `thorough` also the header's own
  // count.
  bool Published(int r, uint64_t step, bool thorough) const;
  // Whether every rank has, looking from *first_missing on (kept across
  // calls of one wait, since steps only grow).
  bool AllPublished(uint64_t step, int* first_missing, bool thorough) const;
  // out = slot 0 op slot 1 op ... over `bytes` at `offset` of slots holding
  // `slot_bytes`; out must not be a slot.
  void FoldSlots(ReduceFn fn, size_t offset, size_t bytes, size_t slot_bytes,
                 size_t elem, char* out) const {
    FoldSlots(fn, offset, bytes, slot_bytes, elem, out, turn_);
  }
  // The same over the slots of `turn`.
  void FoldSlots(ReduceFn fn, size_t offset, size_t bytes, size_t slot_bytes,
                 size_t elem, char* out, int turn) const;
  // out = the rank-order fold of the payloads the last exchange carried.
  void FoldInline(ReduceFn fn, size_t bytes, size_t elem, char* out) const;
  // all_reduce (root < 0) or reduce to root, by slices.
  absl::Status ReduceBySlices(const OpContext& ctx, TensorRef data, ReduceFn fn,
                              int root);
  // Moves every pair's piece through per-destination regions of the slots,
  // in rounds.
  absl::Status Exchange(const OpContext& ctx, const Pieces& pieces);
  // The largest of every rank's `mine` (one small step).
  absl::StatusOr<size_t> MaxOverRanks(const OpContext& ctx, size_t mine);

  // Single copy: whether `op` over `bytes` reads peers' buffers directly
  // (PrefersSingleCopy, and the kernel allows it: the first operation that
  // would probes, one step, every rank).
  absl::StatusOr<bool> UseSingleCopy(const OpContext& ctx, OpCode op,
                                     size_t bytes);
  // Whether single copy beats the slots for `op` over `bytes` in this group
  // (the same answer on every rank).
  bool PrefersSingleCopy(OpCode op, size_t bytes) const;
  // This rank's buffer for the peers to read after the next step.
  void PublishBuffer(const void* buffer);
  // The buffer a single-copy `op` will publish, when it may go with the
  // signature: single copy is known to work and this op at this size takes
  // it; else null.
  const void* EarlyBuffer(OpCode op, const InlinePayload& payload) const;
  // Publishes `buffer` for a single-copy `op` and steps, unless the
  // signature exchange of this very operation already published it.
  absl::Status PublishForSingleCopy(const OpContext& ctx, OpCode op,
                                    const void* buffer);
  // Copies between `local` and `offset` of the buffer rank r published;
  // UNAVAILABLE naming the op, this rank and r when the kernel refuses.
  absl::Status CopyWithPeer(const OpContext& ctx, int r, size_t offset,
                            void* local, size_t bytes, bool write);
  // `bytes` at `offset` of the buffer rank r published.
  absl::Status ReadPeer(const OpContext& ctx, int r, size_t offset, void* local,
                        size_t bytes);
  // `bytes` of `local` to `offset` of the buffer rank r published.
  absl::Status WritePeer(const OpContext& ctx, int r, size_t offset,
                         const void* local, size_t bytes);
  // With `write_back`, each folded piece is also written to `offset` of
  // every peer's buffer while it is still in this core's cache.
  absl::Status FoldPeers(const OpContext& ctx, ReduceFn fn, size_t offset,
                         size_t bytes, size_t elem, const char* own, char* out,
                         bool write_back = false);
  absl::Status AllReduceSingleCopy(const OpContext& ctx, TensorRef data,
                                   ReduceFn fn);
  char* CopyScratch(size_t bytes);

  const int rank_;
  const int size_;
  std::unique_ptr<Backend> gloo_;
  void* base_;
  size_t bytes_;
  const size_t slot_bytes_;  // SlotBytesFor(size_)
  // Rank 0's choices, the same on every rank (GroupHeader).
  const bool single_copy_everywhere_;  // DISTKIT_SHM_SINGLE_COPY=1
  const bool oversubscribed_;          // more ranks than CPUs online
  uint64_t step_ = 0;                  // this rank's last published step
  int turn_ = 0;                       // which of its two slots a chunk uses
  int inline_turn_ = 0;        // the slots the last exchange's payload is in
  size_t inline_bytes_ = 0;    // its size; 0: nothing carried
  std::vector<char> scratch_;  // a non-root's folded slice (reduce)
  enum class SingleCopy { kUnknown, kYes, kNo };
  SingleCopy single_copy_ = SingleCopy::kUnknown;
  std::vector<char> copy_scratch_;  // pieces read from peers, folded
  // Published with the signature of operation early_seq_ (an early_op_).
  const void* early_buffer_ = nullptr;
  OpCode early_op_ = OpCode::kBarrier;
  uint64_t early_seq_ = 0;
  std::vector<PeerWatch> watches_;  // one per rank, kept across waits
  int liveness_cursor_ = 0;         // the last missing rank looked at in turn
  absl::Duration liveness_pause_;   // test-only fault injection
  std::atomic<bool> aborted_{false};
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SHM_BACKEND_H_
