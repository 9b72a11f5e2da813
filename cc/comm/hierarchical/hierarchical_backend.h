// HierarchicalBackend: the gloo backend of a group that spans hosts
// (docs/architecture.md, "Transports and their algorithms"). Inside each host
// the ranks share one shared-memory group (ShmBackend); across hosts only one
// leader per host (its lowest rank) talks, over a Gloo TCP group of the
// leaders. all_reduce is a reduce to the leader inside each host, an all_reduce
// among the leaders and a broadcast back inside each host; broadcast,
// all_gather, reduce and the contract's signature exchange (hence barrier)
// take the same three stages; reduce_scatter is a reduce to the leader, the
// leaders' reduce_scatter over host blocks and a scatter inside the host.
// From twice ChunkPlan's chunk size, all_reduce, all_gather and
// reduce_scatter are cut into chunks whose three stages overlap: the
// leader's link carries one chunk while the host reduces or gathers the next
// and receives the one before (pipelined_collectives.cc).
// Gather, scatter, all_to_all and send/recv go over a Gloo group of every rank
// whose pairs connect on first use, so a job that never calls them opens TCP
// connections between leaders only.
//
// One operation has one deadline across its stages, not a timeout each: a
// leader fixes it when the operation starts (its signature exchange, then
// its data) and hands it to its host stages and its link stages, the
// link's own thread (a cut operation) included, in OpContext::deadline
// (OneDeadline); the other ranks' host stages share their host group's
// deadline (ShmSteps::Step: counted from the first of its waits that reads
// the clock).
//
// A stage that fails on one rank (a dead peer, not a timeout: every rank
// has the same deadline) would leave the others of its host waiting for
// it: the rank marks its host's group failed (their waits end with an error
// naming it; a host group on Gloo's TCP, where no segment could be mapped,
// is disconnected instead) and disconnects its leaders' group.
//
// Abort() aborts each part, which ends this rank's waits, those inside
// Gloo's algorithms (the link stage) included, and stops the link's
// pipeline: the aborted rank's operation returns CANCELLED at once. The
// connections stay open (an abort of a healthy group, which a grow
// replaces, must not reset one a peer may still be reading); the other
// ranks end their waits by their own abort or deadline, as on one host.
// The waits a failure's disconnection ends here report that failure, not
// a cancellation.
//
// DISTKIT_TEST_HOST_SHM=0 (tests only, gloo_registration.cc) puts every
// host's group on Gloo's TCP, as where no shared-memory segment can be mapped;
// DISTKIT_TEST_LINK_PAUSE_MS=N (tests only, pipelined_collectives.cc) makes
// the first host's leader (DISTKIT_TEST_LINK_PAUSE_HOST=h: host h's) pause
// N ms before each chunk it moves, at most until the operation's deadline.

#ifndef DISTKIT_CC_COMM_HIERARCHICAL_HIERARCHICAL_BACKEND_H_
#define DISTKIT_CC_COMM_HIERARCHICAL_HIERARCHICAL_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cc/comm/backend.h"
#include "cc/comm/forwarding_backend.h"
#include "cc/comm/hierarchical/chunk_plan.h"
#include "cc/comm/hierarchical/link_pipeline.h"
#include "cc/comm/op_code.h"
#include "cc/comm/op_context.h"
#include "cc/comm/shm/host_map.h"
#include "cc/comm/shm/shm_backend.h"

namespace distkit {

class HierarchicalBackend : public ForwardingBackend {
 public:
  // The parts, made by the caller: `local` over this host's ranks (nullptr
  // when the host has only this rank), `leaders` over one rank per host
  // (only on leaders, nullptr elsewhere), `everyone` over the whole group
  // with pairs connected on first use.
  HierarchicalBackend(int rank, HostMap hosts, std::unique_ptr<Backend> local,
                      std::unique_ptr<Backend> leaders,
                      std::unique_ptr<Backend> everyone);

  absl::string_view name() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(hosts_.host_of.size()); }

  // Through the host's group and the leaders' own exchange, so that the
  // wait for a late rank happens in the agreement; the data stages that
  // follow find every rank present.
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
  absl::Status ReduceScatter(const OpContext& ctx, TensorRef input,
                             TensorRef output, ReduceOp op) override;
  void Abort() override;

 protected:
  // Gather, scatter, all_to_all and send/recv: over every rank's Gloo group.
  Backend* ForwardTo(const TensorRef&) const override {
    return everyone_.get();
  }
  // Sends and receives go to `everyone`.
  bool ConcurrentTags() const override { return everyone_->ConcurrentTags(); }

 private:
  // Runs one stage; on failure fails the rest of the operation everywhere
  // this rank can reach (see the file comment).
  absl::Status Stage(const OpContext& ctx, absl::Status status);
  // Stage() for a stage inside the host while the link's pipeline runs; a
  // failure also ends the link's stage (aborting the leaders' waits).
  absl::Status LocalStage(const OpContext& ctx, LinkPipeline& link,
                          absl::Status status);
  // After Abort(), a failure is CANCELLED: what ended the stage was the
  // abort, or a peer's answer to it.
  absl::Status IfAborted(const OpContext& ctx, absl::Status status) const;
  // `ctx` with the operation's deadline set (OpContext::deadline) on a
  // leader, fixed by the first call for the operation (sequence number, op
  // and timeout, as the parts key theirs) and shared by its later ones; as
  // it is elsewhere. Called by the operation's thread only.
  OpContext OneDeadline(const OpContext& ctx);
  // The pipeline of the operation in progress, for Abort() to stop, while
  // the pipelined collective that made it runs.
  class ActiveLink {
   public:
    ActiveLink(HierarchicalBackend* backend, LinkPipeline* link);
    ~ActiveLink();

   private:
    HierarchicalBackend* const backend_;
  };
  bool leader() const { return leaders_ != nullptr; }
  // The largest host's rank count: the parts in each host's block.
  size_t MostLocalRanks() const;

  // The three stages overlapped chunk by chunk (pipelined_collectives.cc).
  absl::Status PipelinedAllReduce(const OpContext& ctx, TensorRef data,
                                  ReduceOp op, const ChunkPlan& plan);
  absl::Status PipelinedAllGather(const OpContext& ctx, TensorRef input,
                                  TensorRef output, const ChunkPlan& plan);
  absl::Status PipelinedReduceScatter(const OpContext& ctx, TensorRef input,
                                      TensorRef output, ReduceOp op,
                                      const ChunkPlan& plan);

  const int rank_;
  const HostMap hosts_;
  const int host_;        // this rank's host
  const int local_rank_;  // its index among the host's ranks
  std::unique_ptr<Backend> local_;
  ShmBackend* local_shm_;  // local_ when it is shared memory
  std::unique_ptr<Backend> leaders_;
  std::unique_ptr<Backend> everyone_;
  // reduce_scatter's sum and blocks, all_gather's; the pipelines' chunks.
  std::vector<char> scratch_;
  std::atomic<bool> aborted_{false};
  struct {
    uint64_t seq = 0;  // 0: none yet
    OpCode op = OpCode::kBarrier;
    absl::Duration timeout;
    absl::Time deadline;
  } op_deadline_;  // OneDeadline's
  // The first stage failure that closed this rank's connections (Stage):
  // the waits that closing ends here read as cancelled, and report it.
  absl::Mutex failure_mu_;
  absl::Status failure_ ABSL_GUARDED_BY(failure_mu_);
  absl::Mutex link_mu_;
  LinkPipeline* link_ ABSL_GUARDED_BY(link_mu_) = nullptr;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_HIERARCHICAL_HIERARCHICAL_BACKEND_H_
