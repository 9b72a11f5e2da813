// File: shm_backend.h
//
// ShmBackend: the same-host path of the gloo backend (DESIGN §3). When every
// rank of a group runs on one host, collectives go through one shared-memory
// segment instead of TCP loopback: each rank owns a header (its step counter,
// pid and the current op's signature) and two data slots used alternately.
// A step is: write your part into your slot, publish the step, wait until
// every rank has published it, read what you need from the others' slots.
// Double buffering makes one wait per step enough (a slot is written again
// two steps later, after every rank has published the step in between, i.e.
// finished reading it).
//
// The signature exchange the contract starts every operation with is one step
// through the ranks' headers (ExchangeSignatures). Data larger than a slot is
// pipelined in slot-sized chunks (all_reduce, broadcast, all_gather); the
// operations that would need more (gather, scatter, reduce_scatter,
// all_to_all beyond a slot, uneven all_to_all) and send/recv go to the
// wrapped Gloo backend's data path.
//
// Waiting spins briefly, then yields (ranks may share cores), and checks the
// op's deadline (DEADLINE_EXCEEDED), Abort() (CANCELLED) and whether the
// ranks it waits for are still alive (UNAVAILABLE, peer_liveness.h: exited,
// a zombie, or no heartbeat), as over TCP. A peer that exits after
// publishing the step waited for is not a failure.
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

  // Collective: decides through `store` whether all `size` ranks share this
  // host (and DISTKIT_SHM is not 0) and can map one segment. If they do,
  // returns a backend that wraps make_gloo(true); otherwise make_gloo(false)
  // itself. Every rank reaches the same decision.
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
  // A step whose slot holds at most this much uses a packed slot instead:
  // all ranks' packed slots share a few pages, so a small collective touches
  // O(N) bytes of the segment per rank, not N pages.
  static constexpr size_t kSmallSlotBytes = 256;
  static size_t SlotBytesFor(int size);

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

 private:
  struct GroupHeader;
  struct Header;
  ShmBackend(int rank, int size, std::unique_ptr<Backend> gloo, void* base,
             size_t bytes);

  GroupHeader* group_header() const;
  Header* header(int r) const;
  // Rank r's slot for `step`, for a step whose slots hold `bytes` (the same
  // on every rank): a packed small slot, or a full one.
  char* slot(int r, uint64_t step, size_t bytes) const;
  // Publishes this rank's next step (after its slot is written) and waits
  // until every rank has published it.
  absl::Status Step(const OpContext& ctx);

  const int rank_;
  const int size_;
  std::unique_ptr<Backend> gloo_;
  void* base_;
  size_t bytes_;
  const size_t slot_bytes_;         // SlotBytesFor(size_)
  uint64_t step_ = 0;               // this rank's last published step
  std::vector<PeerWatch> watches_;  // one per rank, kept across waits
  int liveness_cursor_ = 0;         // the last missing rank looked at in turn
  absl::Duration liveness_pause_;   // test-only fault injection
  std::atomic<bool> aborted_{false};
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SHM_BACKEND_H_
