#include "cc/comm/hierarchical/hierarchical_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/core/status.h"

namespace distkit {

HierarchicalBackend::HierarchicalBackend(int rank, HostMap hosts,
                                         std::unique_ptr<Backend> local,
                                         std::unique_ptr<Backend> leaders,
                                         std::unique_ptr<Backend> everyone)
    : rank_(rank),
      hosts_(std::move(hosts)),
      host_(hosts_.host_of[rank]),
      local_rank_(hosts_.LocalIndex(rank)),
      local_(std::move(local)),
      local_shm_(dynamic_cast<ShmBackend*>(local_.get())),
      leaders_(std::move(leaders)),
      everyone_(std::move(everyone)) {}

void HierarchicalBackend::Abort() {
  aborted_ = true;
  // Each part's Abort() ends this rank's waits, those inside Gloo's
  // algorithms included (GlooBackend::Abort). The connections stay open:
  // an abort of a healthy group (a grow replaces it) must not reset a
  // connection whose last bytes a peer may still be reading; the peers end
  // their waits by their own abort or deadline, as on one host.
  if (local_) local_->Abort();
  if (leaders_) leaders_->Abort();
  {
    // A leader without a host group may be waiting in the link's Done().
    absl::MutexLock lock(&link_mu_);
    if (link_ != nullptr) link_->Stop();
  }
  everyone_->Abort();
}

HierarchicalBackend::ActiveLink::ActiveLink(HierarchicalBackend* backend,
                                            LinkPipeline* link)
    : backend_(backend) {
  absl::MutexLock lock(&backend_->link_mu_);
  backend_->link_ = link;
  if (backend_->aborted_.load()) link->Stop();
}

HierarchicalBackend::ActiveLink::~ActiveLink() {
  absl::MutexLock lock(&backend_->link_mu_);
  backend_->link_ = nullptr;
}

absl::Status HierarchicalBackend::IfAborted(const OpContext& ctx,
                                            absl::Status status) const {
  // Once aborted, whatever ended a stage (the abort, a peer's reaction to
  // it) is this rank's abort.
  if (!status.ok() && aborted_.load()) {
    return absl::CancelledError(
        absl::StrCat(ctx.Describe(), ": the group was aborted"));
  }
  return status;
}

size_t HierarchicalBackend::MostLocalRanks() const {
  size_t most = 0;
  for (const std::vector<int>& r : hosts_.ranks)
    most = std::max(most, r.size());
  return most;
}

absl::Status HierarchicalBackend::Stage(const OpContext& ctx,
                                        absl::Status status) {
  status = IfAborted(ctx, std::move(status));
  if (!status.ok() && !aborted_.load()) {
    // After a failure of another stage (the link's thread), what ended
    // this one is that failure's reaction below: this rank's connections
    // closed (a wait cancelled), its host's group marked failed by itself.
    absl::MutexLock lock(&failure_mu_);
    if (!failure_.ok()) return failure_;
  }
  // A timeout or an abort is this rank's own: the host's other ranks reach
  // their deadline (the same timeout) or are aborted by their own caller,
  // and report it themselves with the late ranks named.
  if (status.ok() || absl::IsDeadlineExceeded(status) ||
      absl::IsCancelled(status)) {
    return status;
  }
  // A failure: the host's other ranks would wait for this one at the next
  // stage until their deadline, and the other hosts' leaders on this
  // leader's connections until theirs. Closing those connections fails
  // their stage at once, and each fails its own host's group in turn.
  // A host group on Gloo's TCP (no segment could be mapped) has no failed
  // flag: closing its connections fails its peers' waits instead.
  {
    absl::MutexLock lock(&failure_mu_);
    if (failure_.ok()) failure_ = status;
  }
  if (local_shm_ != nullptr) {
    (void)local_shm_->FailGroup(status);
  } else if (local_) {
    local_->Disconnect();
  }
  if (leaders_) leaders_->Disconnect();
  return status;
}

OpContext HierarchicalBackend::OneDeadline(const OpContext& ctx) {
  // Only a leader fixes it, at the operation's start: it reads the clock in
  // every operation anyway (its Gloo stages' options carry what is left of
  // the deadline). The other ranks wait on the host's group alone, whose
  // ShmSteps keeps one deadline per operation already, fixed at its first
  // wait that reads the clock: fixing theirs here would add a clock read to
  // the small operation's fast path, which has none. Sequence number 0 is
  // no group operation's (each wait has a deadline of its own); a deadline
  // the caller set stays.
  if (!leader() || ctx.seq == 0 || ctx.deadline != absl::InfiniteFuture()) {
    return ctx;
  }
  if (op_deadline_.seq != ctx.seq || op_deadline_.op != ctx.op ||
      op_deadline_.timeout != ctx.timeout) {
    op_deadline_.seq = ctx.seq;
    op_deadline_.op = ctx.op;
    op_deadline_.timeout = ctx.timeout;
    op_deadline_.deadline = absl::Now() + ctx.timeout;
  }
  OpContext timed = ctx;
  timed.deadline = op_deadline_.deadline;
  return timed;
}

absl::Status HierarchicalBackend::ExchangeSignatures(
    const OpContext& caller_ctx, const OpSignature& mine,
    InlinePayload /*payload*/, absl::Span<OpSignature> all) {
  const OpContext ctx = OneDeadline(caller_ctx);
  const std::vector<int>& local_ranks = hosts_.ranks[host_];
  std::vector<OpSignature> local_all(local_ranks.size());
  if (local_) {
    DK_RETURN_IF_ERROR(
        Stage(ctx, local_->ExchangeSignatures(ctx, mine, InlinePayload{},
                                              absl::MakeSpan(local_all))));
  } else {
    local_all[0] = mine;
  }
  const TensorRef everyone(all.data(), all.size() * sizeof(OpSignature),
                           DataType::kUInt8);
  if (leader()) {
    // The leaders meet (abortable) and trade their hosts' blocks, which ride
    // along with that exchange when they fit Gloo's inline budget.
    size_t most = 0;
    for (const std::vector<int>& r : hosts_.ranks) {
      most = std::max(most, r.size());
    }
    local_all.resize(most);
    std::vector<OpSignature> leaders_all(hosts_.hosts());
    DK_RETURN_IF_ERROR(Stage(
        ctx, leaders_->ExchangeSignatures(
                 ctx, mine,
                 InlinePayload{local_all.data(), most * sizeof(OpSignature)},
                 absl::MakeSpan(leaders_all))));
    std::vector<OpSignature> blocks(most * hosts_.hosts());
    DK_RETURN_IF_ERROR(Stage(
        ctx,
        leaders_->AllGatherHost(ctx, local_all.data(),
                                most * sizeof(OpSignature), blocks.data())));
    for (int h = 0; h < hosts_.hosts(); ++h) {
      const std::vector<int>& ranks = hosts_.ranks[h];
      for (size_t i = 0; i < ranks.size(); ++i) {
        all[ranks[i]] = blocks[h * most + i];
      }
    }
  }
  if (local_) {
    DK_RETURN_IF_ERROR(Stage(ctx, local_->Broadcast(ctx, everyone, 0)));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::AllReduce(const OpContext& caller_ctx,
                                            TensorRef data, ReduceOp op) {
  if (data.nbytes() == 0) return absl::OkStatus();
  const OpContext ctx = OneDeadline(caller_ctx);
  const ChunkPlan plan(data.numel(), data.nbytes());
  if (plan.chunks() > 1) return PipelinedAllReduce(ctx, data, op, plan);
  if (local_) DK_RETURN_IF_ERROR(Stage(ctx, local_->Reduce(ctx, data, op, 0)));
  if (leader()) {
    DK_RETURN_IF_ERROR(Stage(ctx, leaders_->AllReduce(ctx, data, op)));
  }
  if (local_) DK_RETURN_IF_ERROR(Stage(ctx, local_->Broadcast(ctx, data, 0)));
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::Broadcast(const OpContext& caller_ctx,
                                            TensorRef data, int root) {
  if (data.nbytes() == 0) return absl::OkStatus();
  const OpContext ctx = OneDeadline(caller_ctx);
  const int root_host = hosts_.host_of[root];
  if (host_ == root_host && local_) {
    DK_RETURN_IF_ERROR(
        Stage(ctx, local_->Broadcast(ctx, data, hosts_.LocalIndex(root))));
  }
  if (leader()) {
    DK_RETURN_IF_ERROR(Stage(ctx, leaders_->Broadcast(ctx, data, root_host)));
  }
  if (host_ != root_host && local_) {
    DK_RETURN_IF_ERROR(Stage(ctx, local_->Broadcast(ctx, data, 0)));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::Reduce(const OpContext& ctx, TensorRef data,
                                         ReduceOp op, int root) {
  // Nothing to move (AllReduce would return at once too; the copies below
  // would pass memcpy a null pointer).
  if (data.nbytes() == 0) return absl::OkStatus();
  // Every rank's buffer but the root's stays as it was: reduce a copy.
  if (scratch_.size() < data.nbytes()) scratch_.resize(data.nbytes());
  std::memcpy(scratch_.data(), data.data(), data.nbytes());
  DK_RETURN_IF_ERROR(AllReduce(
      ctx, TensorRef(scratch_.data(), data.numel(), data.dtype()), op));
  if (rank_ == root) std::memcpy(data.data(), scratch_.data(), data.nbytes());
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::AllGather(const OpContext& caller_ctx,
                                            TensorRef input, TensorRef output) {
  const size_t part = input.nbytes();
  if (part == 0) return absl::OkStatus();
  const OpContext ctx = OneDeadline(caller_ctx);
  const ChunkPlan plan(static_cast<int64_t>(part), output.nbytes());
  if (plan.chunks() > 1) return PipelinedAllGather(ctx, input, output, plan);
  const int hosts = hosts_.hosts();
  const size_t most = MostLocalRanks();  // parts per host block
  const size_t block = most * part;
  const int local_size = static_cast<int>(hosts_.ranks[host_].size());
  char* out = static_cast<char*>(output.data());
  // On leaders: every host's block (rank parts in local order), then this
  // host's block as the leaders' all_gather input. Where hosts hold
  // consecutive ranks alike, the blocks are the output itself, in order.
  const bool in_order = hosts_.ranks_in_host_order();
  char* blocks = nullptr;
  char* mine = nullptr;
  if (leader() && in_order) {
    blocks = out;
    mine = out + host_ * block;
  } else if (leader()) {
    if (scratch_.size() < (hosts + 1) * block) {
      scratch_.resize((hosts + 1) * block);
    }
    blocks = scratch_.data();
    mine = blocks + hosts * block;
  }
  const TensorRef in_bytes(input.data(), part, DataType::kUInt8);
  if (local_) {
    // Non-leaders pass `output` (large enough) where only the root writes.
    DK_RETURN_IF_ERROR(Stage(
        ctx, local_->Gather(ctx, in_bytes,
                            TensorRef(leader() ? mine : out, local_size * part,
                                      DataType::kUInt8),
                            0)));
  } else if (mine != input.data()) {
    std::memcpy(mine, input.data(), part);
  }
  if (leader()) {
    DK_RETURN_IF_ERROR(
        Stage(ctx, leaders_->AllGather(
                       ctx, TensorRef(mine, block, DataType::kUInt8),
                       TensorRef(blocks, hosts * block, DataType::kUInt8))));
    for (int h = 0; h < hosts && !in_order; ++h) {
      const std::vector<int>& ranks = hosts_.ranks[h];
      for (size_t i = 0; i < ranks.size(); ++i) {
        std::memcpy(out + ranks[i] * part, blocks + h * block + i * part, part);
      }
    }
  }
  if (local_) {
    DK_RETURN_IF_ERROR(Stage(
        ctx, local_->Broadcast(
                 ctx, TensorRef(out, output.nbytes(), DataType::kUInt8), 0)));
  }
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::ReduceScatter(const OpContext& caller_ctx,
                                                TensorRef input,
                                                TensorRef output, ReduceOp op) {
  const size_t part = output.nbytes();
  if (part == 0) return absl::OkStatus();
  const OpContext ctx = OneDeadline(caller_ctx);
  const size_t total = input.nbytes();
  const ChunkPlan plan(output.numel(), total);
  if (plan.chunks() > 1) {
    return PipelinedReduceScatter(ctx, input, output, op, plan);
  }
  const int hosts = hosts_.hosts();
  const std::vector<int>& local_ranks = hosts_.ranks[host_];
  const size_t local_size = local_ranks.size();
  const size_t most = MostLocalRanks();  // parts per host block
  const size_t block = most * part;
  // The host's sum of the whole input (reduced into a copy: the input stays
  // as it was); on leaders then every host's block (its ranks' parts in
  // local order, zero-padded to `most` parts), of which the leaders'
  // reduce_scatter leaves each leader its own host's: each link carries
  // (hosts - 1) blocks, half of what an all_reduce of the whole sum did.
  // Scratch: the sum, then on leaders the reordered blocks (unless hosts
  // hold consecutive ranks alike: the sum is in order already) and this
  // host's reduced block. A non-leader's `parts` is never read.
  const bool in_order = hosts_.ranks_in_host_order();
  const size_t reordered = leader() && !in_order ? hosts * block : 0;
  const size_t need = total + reordered + (leader() ? block : 0);
  if (scratch_.size() < need) scratch_.resize(need);
  char* sum = scratch_.data();
  char* blocks = sum + total;
  char* parts = leader() ? blocks + reordered : sum;
  std::memcpy(sum, input.data(), total);
  const TensorRef whole(sum, input.numel(), input.dtype());
  if (local_) DK_RETURN_IF_ERROR(Stage(ctx, local_->Reduce(ctx, whole, op, 0)));
  if (leader()) {
    // Hosts of equal size holding consecutive ranks (0-1 on the first, 2-3
    // on the next: what launchers do) have their blocks in order already.
    if (in_order) {
      blocks = sum;
    } else {
      std::memset(blocks, 0, hosts * block);
      for (int h = 0; h < hosts; ++h) {
        const std::vector<int>& ranks = hosts_.ranks[h];
        for (size_t i = 0; i < ranks.size(); ++i) {
          std::memcpy(blocks + h * block + i * part, sum + ranks[i] * part,
                      part);
        }
      }
    }
    const int64_t block_numel = static_cast<int64_t>(most) * output.numel();
    DK_RETURN_IF_ERROR(Stage(
        ctx, leaders_->ReduceScatter(
                 ctx, TensorRef(blocks, hosts * block_numel, output.dtype()),
                 TensorRef(parts, block_numel, output.dtype()), op)));
  }
  if (local_) {
    return Stage(
        ctx,
        local_->Scatter(
            ctx, TensorRef(parts, local_size * output.numel(), output.dtype()),
            output, 0));
  }
  std::memcpy(output.data(), parts, part);
  return absl::OkStatus();
}

}  // namespace distkit
