#include "cc/comm/shm/shm_backend.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "cc/comm/shm/eager_exchange.h"
#include "cc/comm/shm/shm_thresholds.h"
#include "cc/comm/shm/single_copy_collectives.h"
#include "cc/comm/shm/slot_copy.h"
#include "cc/comm/shm/slot_exchange.h"
#include "cc/comm/shm/slot_reduce.h"
#include "cc/core/bench_without.h"
#include "cc/core/data_type.h"
#include "cc/core/status.h"

namespace distkit {

absl::StatusOr<std::unique_ptr<Backend>> ShmBackend::MaybeWrap(
    std::shared_ptr<Store> store, int rank, int size,
    const WrappedFactory& make_gloo, absl::Duration timeout, RankNames names) {
  if (size < 2 || size > kMaxRanks) return make_gloo(false);
  // Rank 0's environment and host decide for every rank.
  ShmMapping::GroupChoices choices;
  const char* single = std::getenv("DISTKIT_SHM_SINGLE_COPY");
  choices.single_copy_everywhere =
      single != nullptr && std::string(single) == "1";
  choices.oversubscribed = size > sysconf(_SC_NPROCESSORS_ONLN);
  const char* eager = std::getenv("DISTKIT_SHM_EAGER");
  choices.eager = eager != nullptr && std::string(eager) == "1";
  DK_ASSIGN_OR_RETURN(std::unique_ptr<ShmMapping> mapping,
                      ShmMapping::Map(*store, rank, size, choices, timeout));
  if (mapping == nullptr) return make_gloo(false);
  std::unique_ptr<ShmBackend> b(new ShmBackend(
      rank, size, [make_gloo] { return make_gloo(true); }, std::move(mapping),
      std::move(names)));
  ShmRankHeader* mine = b->layout().header(rank);
  // Group creation already refused a malformed value (ProcessGroup).
  absl::StatusOr<BenchWithout> without = BenchWithoutFromEnvironment();
  if (without.ok() && without->watch_threads) {
    ClaimWithoutHeartbeat(&mine->liveness);
  } else {
    StartHeartbeat(&mine->liveness);
  }
  std::random_device rd;
  mine->probe_token = (uint64_t{rd()} << 32 | rd()) | 1;
  mine->probe_addr = reinterpret_cast<uintptr_t>(&mine->probe_token);
  return std::unique_ptr<Backend>(std::move(b));
}

ShmBackend::ShmBackend(int rank, int size, BackendOnFirstUse::Factory make_gloo,
                       std::unique_ptr<ShmMapping> mapping, RankNames names)
    : rank_(rank),
      size_(size),
      gloo_(std::move(make_gloo)),
      mapping_(std::move(mapping)),
      oversubscribed_(mapping_->layout().group()->oversubscribed != 0),
      eager_(mapping_->layout().group()->eager != 0),
      steps_(mapping_->layout(), rank, std::move(names)),
      single_copy_(&steps_,
                   mapping_->layout().group()->single_copy_everywhere != 0,
                   oversubscribed_) {}

ShmBackend::~ShmBackend() {
  StopHeartbeat(&layout().header(rank_)->liveness);
  // mapping_ unmaps the segment after the members that read it are gone.
}

void ShmBackend::Abort() {
  steps_.Abort();
  gloo_.Abort();
}

absl::Status ShmBackend::Send(const OpContext& ctx, TensorRef data, int dst,
                              int tag) {
  DK_ASSIGN_OR_RETURN(Backend * gloo, gloo_.Get());
  return gloo->Send(ctx, data, dst, tag);
}

absl::Status ShmBackend::Recv(const OpContext& ctx, TensorRef data, int src,
                              int tag) {
  DK_ASSIGN_OR_RETURN(Backend * gloo, gloo_.Get());
  return gloo->Recv(ctx, data, src, tag);
}

absl::Status ShmBackend::FailGroup(absl::Status why) {
  return steps_.FailGroup(std::move(why));
}

// ---- The signature exchange ------------------------------------------------

absl::Status ShmBackend::ExchangeSignatures(const OpContext& ctx,
                                            const OpSignature& mine,
                                            InlinePayload payload,
                                            absl::Span<OpSignature> all) {
  const OpCode op = static_cast<OpCode>(mine.op);
  const bool carry = CarriesPayload(op, payload.bytes);
  inline_bytes_ = 0;
  single_copy_.SetEarly(nullptr, op, mine.seq);
  if (eager_ && carry && TakesEagerStep(op, payload.bytes)) {
    // No published buffer: a peer whose call differs must not find the
    // last operation's (see below).
    single_copy_.PublishBuffer(nullptr);
    uint64_t step = 0;
    DK_RETURN_IF_ERROR(
        EagerExchange(steps_, ctx, mine, payload, &chain_, &step));
    // The peers' calls not heard from here are compared later (the chain);
    // the contract's check sees this rank's own.
    for (OpSignature& s : all) s = mine;
    inline_eager_step_ = step;
    inline_bytes_ = payload.bytes;
    return absl::OkStatus();
  }
  // The payload rides along in this turn's slot (CarriesPayload), so the
  // operation takes one step, not two. Every rank flips its turn here
  // whatever it carried: ranks whose calls disagree (so their payload sizes
  // may differ) stay in step. Writing a slot before the signatures agree is
  // safe: its last readers are two steps behind, and nobody reads it unless
  // they agree.
  if (carry && payload.data != nullptr) {
    std::memcpy(steps_.slot(rank_, payload.bytes), payload.data, payload.bytes);
  }
  // A single-copy operation's buffer is published with the signature: the
  // operation then skips the step that would publish it.
  const void* early = carry ? nullptr : single_copy_.EarlyBuffer(op, payload);
  // Null too (0: nothing published): a peer whose signature matches this
  // one but whose call goes another way here (a tensor on another device
  // under "cpu:gloo,cuda:nccl") must find no address rather than the last
  // operation's, whose buffer may be gone.
  single_copy_.PublishBuffer(early);
  ShmRankHeader::Turn& turn = layout().header(rank_)->turns[steps_.turn()];
  turn.sig = mine;
  turn.chain = chain_;
  if (absl::Status stepped = steps_.Step(ctx); !stepped.ok()) {
    // The peers that passed this step may already copy with the buffer
    // published early (this rank may have seen a failure they did not).
    return early != nullptr ? single_copy_.Leave(ctx, std::move(stepped))
                            : stepped;
  }
  // Every rank's call, and whether every rank took the same eager steps
  // before it (a difference there fails the group: eager_exchange.h).
  if (absl::Status chains =
          CheckChains(steps_, ctx, chain_, steps_.step(), all);
      !chains.ok()) {
    return early != nullptr ? single_copy_.Leave(ctx, std::move(chains))
                            : chains;
  }
  bool same = early != nullptr;  // compared only where it matters
  for (int r = 0; same && r < size_; ++r) {
    same = std::memcmp(&all[r], &mine, sizeof(mine)) == 0;
  }
  inline_turn_ = steps_.turn();
  inline_eager_step_ = 0;
  inline_bytes_ = carry ? payload.bytes : 0;
  // Only where every rank called this same operation (then each published
  // early): taken by that operation alone (PublishForSingleCopy).
  if (same) single_copy_.SetEarly(early, op, mine.seq);
  steps_.FlipTurn();
  return absl::OkStatus();
}

bool ShmBackend::CarriesPayload(OpCode op, size_t bytes) const {
  if (bytes == 0) return false;
  if (bytes <= kSmallSlotBytes) return true;
  // Larger payloads ride along only where the operation would have sent
  // them in one chunk through the same slots anyway.
  switch (op) {
    case OpCode::kAllReduce:
    case OpCode::kReduce:
      return bytes <= kSliceReduceFromBytes;  // the one-step fold wins
    case OpCode::kBroadcast:
      return bytes <= (oversubscribed_ ? layout().slot_bytes()
                                       : kFirstBroadcastChunk) &&
             !single_copy_.Prefers(op, bytes);
    case OpCode::kAllGather:
      return bytes <= layout().slot_bytes() &&
             !single_copy_.Prefers(op, bytes * static_cast<size_t>(size_));
    case OpCode::kGather:
      bytes *= static_cast<size_t>(size_);  // then as scatter's
      [[fallthrough]];
    case OpCode::kScatter:  // `bytes`: the root's whole input
      // One step through the slots beats single copy's two below the rooted
      // threshold, unless single copy is asked for everywhere.
      return bytes <= layout().slot_bytes() &&
             bytes < kSingleCopyRootedFromBytes &&
             !(single_copy_.everywhere() && single_copy_.Prefers(op, bytes));
    case OpCode::kReduceScatter:  // every rank's whole input
      return bytes <= layout().slot_bytes() && !single_copy_.Prefers(op, bytes);
    case OpCode::kAllToAll:  // every rank's whole input
      return bytes <= layout().slot_bytes() && !single_copy_.Prefers(op, bytes);
    default:
      return false;
  }
}

bool ShmBackend::TakeInline(size_t bytes) {
  const bool carried = bytes > 0 && inline_bytes_ == bytes;
  inline_bytes_ = 0;
  return carried;
}

const char* ShmBackend::InlineSlot(int r, size_t bytes) const {
  if (inline_eager_step_ != 0) {
    return layout().eager(r, inline_eager_step_)->small;
  }
  return layout().slot(r, bytes, inline_turn_);
}

void ShmBackend::FoldInline(ReduceFn fn, size_t bytes, size_t elem,
                            char* out) const {
  if (inline_eager_step_ == 0) {
    FoldSlots(layout(), fn, 0, bytes, bytes, elem, out, inline_turn_);
    return;
  }
  // In rank order, as FoldSlots and every other path.
  const size_t n = bytes / elem;
  fn(out, InlineSlot(0, bytes), InlineSlot(1, bytes), n);
  for (int r = 2; r < size_; ++r) fn(out, out, InlineSlot(r, bytes), n);
}

void ShmBackend::CopyInlineParts(size_t part, char* out) const {
  for (int r = 0; r < size_; ++r) {
    std::memcpy(out + r * part, InlineSlot(r, part), part);
  }
}

// ---- Collectives: which path -----------------------------------------------
//
// Each operation first takes what the signature exchange carried, then
// single copy where it is preferred and allowed, else the slots.

absl::Status ShmBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                   ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(data.dtype(), op));
  if (TakeInline(data.nbytes())) {
    FoldInline(fn, data.nbytes(), ElementSize(data.dtype()),
               static_cast<char*>(data.data()));
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(bool single_copy,
                      single_copy_.Use(ctx, OpCode::kAllReduce, data.nbytes()));
  if (single_copy) {
    return single_copy_.Leave(
        ctx, AllReduceBySingleCopy(single_copy_, ctx, data, fn));
  }
  if (data.nbytes() > kSliceReduceFromBytes) {
    return ReduceBySlices(steps_, ctx, data, fn, /*root=*/-1, &scratch_);
  }
  return ReduceInOneStep(steps_, ctx, data, fn, /*root=*/-1);
}

absl::Status ShmBackend::Reduce(const OpContext& ctx, TensorRef data,
                                ReduceOp op, int root) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(data.dtype(), op));
  if (TakeInline(data.nbytes())) {
    if (rank_ == root) {
      FoldInline(fn, data.nbytes(), ElementSize(data.dtype()),
                 static_cast<char*>(data.data()));
    }
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(bool single_copy,
                      single_copy_.Use(ctx, OpCode::kReduce, data.nbytes()));
  if (single_copy) {
    return single_copy_.Leave(
        ctx, ReduceBySingleCopy(single_copy_, ctx, data, fn, root));
  }
  if (data.nbytes() > kSliceReduceFromBytes) {
    return ReduceBySlices(steps_, ctx, data, fn, root, &scratch_);
  }
  return ReduceInOneStep(steps_, ctx, data, fn, root);
}

absl::Status ShmBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                   int root) {
  if (TakeInline(data.nbytes())) {
    if (rank_ != root) {
      std::memcpy(data.data(), InlineSlot(root, data.nbytes()), data.nbytes());
    }
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(bool single_copy,
                      single_copy_.Use(ctx, OpCode::kBroadcast, data.nbytes()));
  if (single_copy) {
    return single_copy_.Leave(
        ctx, BroadcastBySingleCopy(single_copy_, ctx, data, root));
  }
  return BroadcastBySlots(steps_, ctx, data, root, oversubscribed_);
}

absl::Status ShmBackend::AllGather(const OpContext& ctx, TensorRef input,
                                   TensorRef output) {
  const size_t part = input.nbytes();
  if (TakeInline(part)) {
    CopyInlineParts(part, static_cast<char*>(output.data()));
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(
      bool single_copy,
      single_copy_.Use(ctx, OpCode::kAllGather, output.nbytes()));
  if (single_copy) {
    return single_copy_.Leave(
        ctx, AllGatherBySingleCopy(single_copy_, ctx, input, output));
  }
  return AllGatherBySlots(steps_, ctx, input, output);
}

absl::Status ShmBackend::Gather(const OpContext& ctx, TensorRef input,
                                TensorRef output, int root) {
  const size_t part = input.nbytes();
  if (TakeInline(part)) {
    if (rank_ == root) CopyInlineParts(part, static_cast<char*>(output.data()));
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(
      bool single_copy,
      single_copy_.Use(ctx, OpCode::kGather, input.nbytes() * size_));
  if (single_copy) {
    return single_copy_.Leave(
        ctx, GatherBySingleCopy(single_copy_, ctx, input, output, root));
  }
  return GatherBySlots(steps_, ctx, input, output, root);
}

absl::Status ShmBackend::Scatter(const OpContext& ctx, TensorRef input,
                                 TensorRef output, int root) {
  // The root's whole input rode along in its slot.
  const size_t part = output.nbytes(), whole = part * size_;
  if (TakeInline(whole)) {
    std::memcpy(output.data(), InlineSlot(root, whole) + rank_ * part, part);
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(
      bool single_copy,
      single_copy_.Use(ctx, OpCode::kScatter, output.nbytes() * size_));
  if (single_copy) {
    return single_copy_.Leave(
        ctx, ScatterBySingleCopy(single_copy_, ctx, input, output, root));
  }
  return ScatterBySlots(steps_, ctx, input, output, root);
}

absl::Status ShmBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                       TensorRef output, ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(output.dtype(), op));
  // Every rank's whole input rode along: this rank folds its own part.
  if (TakeInline(input.nbytes())) {
    FoldSlots(layout(), fn, rank_ * output.nbytes(), output.nbytes(),
              input.nbytes(), ElementSize(output.dtype()),
              static_cast<char*>(output.data()), inline_turn_);
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(
      bool single_copy,
      single_copy_.Use(ctx, OpCode::kReduceScatter, input.nbytes()));
  if (single_copy) {
    return single_copy_.Leave(
        ctx, ReduceScatterBySingleCopy(single_copy_, ctx, input, output, fn));
  }
  return ReduceScatterBySlots(steps_, ctx, input, output, fn);
}

absl::Status ShmBackend::AllToAll(const OpContext& ctx, TensorRef input,
                                  absl::Span<const int64_t> input_splits,
                                  TensorRef output,
                                  absl::Span<const int64_t> output_splits) {
  // Even splits: every rank's whole input rode along; take this rank's part
  // of each.
  if (input_splits.empty() && output_splits.empty() &&
      TakeInline(input.nbytes())) {
    const size_t part = output.nbytes() / size_;
    for (int r = 0; r < size_; ++r) {
      std::memcpy(static_cast<char*>(output.data()) + r * part,
                  layout().slot(r, input.nbytes(), inline_turn_) + rank_ * part,
                  part);
    }
    return absl::OkStatus();
  }
  if (input_splits.empty() && output_splits.empty()) {
    DK_ASSIGN_OR_RETURN(
        bool single_copy,
        single_copy_.Use(ctx, OpCode::kAllToAll, input.nbytes()));
    if (single_copy) {
      return single_copy_.Leave(
          ctx, AllToAllBySingleCopy(single_copy_, ctx, input, output));
    }
  }
  return AllToAllBySlots(steps_, ctx, input, input_splits, output,
                         output_splits);
}

}  // namespace distkit
