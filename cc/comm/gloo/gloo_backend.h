// GlooBackend moves CPU buffers over Gloo's TCP transport, rendezvousing
// through a distkit Store. The contract above it (cc/group) agrees on every
// operation first; this backend's signature exchange is one direct exchange
// among all ranks that also carries payloads up to inline_limit(), so small
// and medium operations finish locally from those records (one network hop
// instead of Gloo's 2(n-1) steps); larger ones use Gloo's algorithms. The
// exchange uses unbound buffers this class holds, and Gloo's algorithms'
// buffers are made through the mesh, so Abort() can wake an operation stuck
// waiting for a peer.
//
// Transport failures: a peer that dies -> UNAVAILABLE; a peer that never
// joins -> DEADLINE_EXCEEDED at the op's deadline (one for the whole
// operation: its phases and every wait in them share it); an abort ->
// CANCELLED.

#ifndef DISTKIT_CC_COMM_GLOO_GLOO_BACKEND_H_
#define DISTKIT_CC_COMM_GLOO_GLOO_BACKEND_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cc/comm/backend.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/gloo/pair_mesh.h"
#include "cc/comm/op_signature.h"
#include "cc/comm/rank_names.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/store/store.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace distkit {

class GlooBackend : public Backend {
 public:
  struct Options {
    // The address peers use to reach this rank's Gloo device.
    std::string hostname = "127.0.0.1";
    // How messages name this backend's ranks (its numbering may be a part's
    // of another backend, cc/comm/rank_names.h).
    RankNames names;
    // Timeout of the connection set-up and the default for operations.
    absl::Duration timeout = absl::Minutes(30);
    // Connect no pair at creation: each when an operation first needs it
    // (pair_mesh.h). For groups whose collectives go elsewhere (the
    // same-host shared-memory path).
    bool connect_on_demand = false;
  };

  // Connects a full mesh among `size` ranks through `store` (which should be
  // a PrefixStore private to this group), one store round trip each way per
  // rank. Blocks until every rank joins or the timeout passes; with
  // connect_on_demand it returns at once and connects nothing.
  static absl::StatusOr<std::unique_ptr<GlooBackend>> Create(
      std::shared_ptr<Store> store, int rank, int size, const Options& options);
  // The same from a registry config; an empty hostname is chosen from the
  // environment and the route to the store (listen_address.h).
  static absl::StatusOr<std::unique_ptr<GlooBackend>> Create(
      const BackendConfig& config, bool connect_on_demand = false);
  // The address Create(config) listens on: config.hostname, else chosen from
  // the environment and the route to the store. Cheap (no thread, no name
  // lookup), so a backend made later can have its address checked now.
  static absl::StatusOr<std::string> ListenHostname(
      const BackendConfig& config);

  ~GlooBackend() override;

  absl::string_view name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  // Each tag is a slot of its own in Gloo's pairs.
  bool ConcurrentTags() const override { return true; }
  int size() const override { return size_; }

  absl::Status ExchangeSignatures(const OpContext& ctx, const OpSignature& mine,
                                  InlinePayload payload,
                                  absl::Span<OpSignature> all) override;
  // Above inline_limit() the exchange carries only the signatures.
  bool AgreementSkippable(OpCode op, size_t payload_bytes) const override {
    return payload_bytes > CarryLimit(op == OpCode::kAllToAll);
  }

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
                    int tag) override;
  absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                    int tag) override;
  // Wakes every wait in progress, this class's own exchanges' (Wait()) and
  // those inside Gloo's algorithms (PairMesh::AbortWaits), and refuses later
  // calls. Peers waiting for this rank wait on: Disconnect() tells them.
  void Abort() override;
  // Abort, then close every connection (PairMesh::CloseAll).
  void Disconnect() override;

  // Payloads up to inline_limit() bytes travel inside the signature exchange.
  // With the direct exchange (groups of up to 32 ranks) a rank may send up to
  // kInlineBudget bytes in all, so the limit is kInlineBudget / (size - 1):
  // 1 MiB with 2 ranks, 341 KiB with 4. Larger groups use Gloo's ring with
  // fixed-size records of kRingInlineBytes. Receives are posted at full size
  // and each rank sends only what it has: Gloo accepts a message shorter than
  // the receive, never a longer one.
  static constexpr size_t kInlineBudget = 1 << 20;
  static constexpr size_t kRingInlineBytes = 2048;
  size_t inline_limit() const;
  // The largest payload carried: inline_limit(), or for a `spread` one
  // (InlinePayload::spread) at most kRingInlineBytes.
  size_t CarryLimit(bool spread) const;

 private:
  GlooBackend(int rank, int size, std::unique_ptr<PairMesh> mesh,
              RankNames names);

  // Whether the last signature exchange carried a payload of `bytes` (the
  // data operation then completes from the records); forgets it either way.
  bool TakeInline(size_t bytes);
  const char* InlineData(int rank) const;
  // out = the reduction, in rank order, of every rank's inline record at
  // byte `offset`.
  void FoldInline(ReduceFn fn, TensorRef out, size_t offset) const;
  // Waits until `deadline` (the operation's) for a send or receive on
  // `buffer` to complete, such that Abort() can wake it. Throws on timeout
  // (Gloo) or abort.
  void Wait(gloo::transport::UnboundBuffer& buffer, bool recv,
            absl::Time deadline);

  // Connects the pairs the call needs (every peer, or `peer` alone), then
  // runs `body` (Gloo calls that may throw) with the operation's deadline
  // (Deadline(ctx)), turning exceptions into Status. CANCELLED without
  // running `body` once aborted.
  static constexpr int kAllPeers = -1;
  absl::Status Guarded(const OpContext& ctx,
                       const std::function<void(absl::Time deadline)>& body,
                       int peer = kAllPeers);
  // The operation's one deadline, ctx.timeout after its first call into this
  // backend: every phase of it (the signature exchange, a split matrix, the
  // data; connecting; each wait) gets only what is left, on the thread that
  // runs it.
  absl::Time Deadline(const OpContext& ctx) const;
  // CANCELLED naming the operation, group and rank.
  absl::Status Cancelled(const OpContext& ctx) const;

  const uint64_t id_;  // unique in the process, for Deadline()
  const int rank_;
  const int size_;
  const RankNames names_;
  std::unique_ptr<PairMesh> mesh_;
  std::shared_ptr<gloo::Context> context_;  // mesh_'s
  // Signature exchange buffers, kept between calls (no per-call allocation).
  // Left uninitialized: a page is touched only once a payload reaches it.
  // Zeroed, the receive slots cost every rank of a 512-rank job 1 MiB of
  // page faults at start-up (O(N^2) over the job), mostly never used.
  const size_t slot_bytes_;            // signature + the largest inline payload
  std::unique_ptr<char[]> send_slot_;  // slot_bytes_
  std::unique_ptr<char[]> recv_slots_;  // slot_bytes_ * size_
  std::vector<char> scratch_;
  // The reduce-scatter ring's two halves of incoming pieces (kept: the
  // hierarchical pipeline calls it once per chunk).
  std::vector<char> ring_incoming_;
  std::unique_ptr<gloo::transport::UnboundBuffer> agree_send_;
  std::unique_ptr<gloo::transport::UnboundBuffer> agree_recv_;

  // The payload size the last exchange carried, or -1.
  int64_t inline_bytes_ = -1;

  absl::Mutex mu_;
  // Buffers with a wait in progress, for Abort() to wake.
  absl::flat_hash_set<gloo::transport::UnboundBuffer*> inflight_
      ABSL_GUARDED_BY(mu_);
  std::atomic<bool> aborted_{false};
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_GLOO_GLOO_BACKEND_H_
