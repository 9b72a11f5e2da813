#include "cc/comm/shm/single_copy_path.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/comm/shm/peer_liveness.h"
#include "cc/comm/shm/shm_segment.h"
#include "cc/comm/shm/shm_thresholds.h"
#include "cc/comm/shm/single_copy.h"
#include "cc/comm/shm/slot_exchange.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// The test hook's factory slot (single_copy_test_hook.h): empty unless a
// test program links the hook's library.
std::atomic<SingleCopyTestHook::Factory>& TestHookFactory() {
  static std::atomic<SingleCopyTestHook::Factory> factory{nullptr};
  return factory;
}

}  // namespace

std::unique_ptr<SingleCopyTestHook> SingleCopyTestHook::Make() {
  const Factory factory = TestHookFactory().load();
  return factory != nullptr ? factory() : nullptr;
}

void SingleCopyTestHook::Install(Factory factory) {
  TestHookFactory().store(factory);
}

bool SingleCopyPath::Prefers(OpCode op, size_t bytes) const {
  // Measured on these machines (2 cores; world 2 = a core per rank, world 4
  // = oversubscribed), the paths alternated in one run, medians of 3
  // (tools/dkbench/RESULTS.md, issue 15). An all_reduce that writes its
  // results into the peers (AllReduceBySingleCopy) wins from just past the
  // one-step fold with a core per rank (20 KiB: 3.9 against 5.3 us by the
  // slots; 1 MiB: 71 against 180 us), and from 1 MiB oversubscribed, where
  // the slots win below (a process_vm_readv pins the peer's pages while
  // that peer may not be running). For the other operations the pipelined
  // slots win or tie at every size oversubscribed; with a core per rank,
  // single copy wins for all_gather, reduce_scatter and broadcast at every
  // size (a broadcast's root and reader each move half: 1.2-2.8x OpenMPI
  // from 256 KiB, where the reader alone moving all of it lost to the slots
  // from 4 MiB), and for gather and scatter, which also win oversubscribed
  // from 256 KiB (16 MiB gather at world size 4: 1.39 against 1.70 ms by
  // the slots; at 64 KiB, 15.3 against 12.7 us). Below 256 KiB a gather or
  // scatter that fits a slot rides with the signature instead, one step
  // (ShmBackend::CarriesPayload), unless DISTKIT_SHM_SINGLE_COPY=1.
  if (op == OpCode::kAllReduce && !oversubscribed_) {
    return bytes > kSliceReduceFromBytes;
  }
  if (op == OpCode::kReduce) {
    // The root folds every peer's buffer alone (ReduceBySingleCopy): fewer
    // copies than the slices at two ranks, a serial fold of size - 1 peers
    // beyond, so by slices there (DISTKIT_SHM_SINGLE_COPY=1 still takes it,
    // which is how the tests reach it at 3 and 4 ranks).
    if (single_copy_everywhere_) return bytes >= kSingleCopyFromBytes;
    return !oversubscribed_ && steps_->size() == 2 &&
           bytes > kSliceReduceFromBytes;
  }
  if (bytes < kSingleCopyFromBytes) return false;
  if (single_copy_everywhere_ || !oversubscribed_) return true;
  switch (op) {
    case OpCode::kAllReduce:
      return bytes >= kSingleCopyAllReduceFromBytes;
    case OpCode::kGather:  // each rank copies to or from the root alone
    case OpCode::kScatter:
      return bytes >= kSingleCopyRootedFromBytes;
    default:
      return false;
  }
}

absl::StatusOr<bool> SingleCopyPath::Use(const OpContext& ctx, OpCode op,
                                         size_t bytes) {
  if (!Prefers(op, bytes)) return false;
  if (allowed_ == Allowed::kUnknown) {
    // Once per group, at the first operation large enough (the same one on
    // every rank): each rank reads its right neighbour's token and writes the
    // same value back (a broadcast's root writes into its readers); one
    // refusal anywhere keeps the whole group on the slots.
    bool ok = SingleCopyAllowed();
    if (ok) {
      const int peer = (steps_->rank() + 1) % steps_->size();
      const ShmRankHeader* h = steps_->layout().header(peer);
      const int pid = h->liveness.pid.load();
      void* remote = reinterpret_cast<void*>(h->probe_addr.load());
      uint64_t token = 0;
      ok = ReadPeerMemory(pid, remote, &token, sizeof(token)).ok() &&
           token == h->probe_token.load() &&
           WritePeerMemory(pid, remote, &token, sizeof(token)).ok();
    }
    DK_ASSIGN_OR_RETURN(size_t refused, MaxOverRanks(*steps_, ctx, ok ? 0 : 1));
    allowed_ = refused == 0 ? Allowed::kYes : Allowed::kNo;
  }
  return allowed_ == Allowed::kYes;
}

const void* SingleCopyPath::EarlyBuffer(OpCode op,
                                        const InlinePayload& payload) const {
  if (allowed_ != Allowed::kYes) return nullptr;
  switch (op) {
    case OpCode::kAllReduce:
    case OpCode::kBroadcast:
    case OpCode::kReduce:
      return Prefers(op, payload.bytes) ? payload.output : nullptr;
    case OpCode::kAllGather:  // payload: the input; the output is published
      return Prefers(op, payload.bytes * steps_->size()) ? payload.output
                                                         : nullptr;
    case OpCode::kReduceScatter:  // the peers read the input
    case OpCode::kAllToAll:       // (even parts: uneven ones carry nothing)
      return Prefers(op, payload.bytes) ? payload.data : nullptr;
    default:
      return nullptr;
  }
}

void SingleCopyPath::PublishBuffer(const void* buffer) {
  // Released by the next step's arrival. Stored only when it changes: the
  // line is the one peers poll for `step`, and most operations publish
  // nothing (null) after one that published nothing.
  std::atomic<uint64_t>& published =
      steps_->layout().header(steps_->rank())->buffer;
  const uint64_t address = reinterpret_cast<uintptr_t>(buffer);
  if (published.load(std::memory_order_relaxed) != address) {
    published.store(address, std::memory_order_relaxed);
  }
}

absl::Status SingleCopyPath::PublishForSingleCopy(const OpContext& ctx,
                                                  OpCode op,
                                                  const void* buffer) {
  const void* early = std::exchange(early_buffer_, nullptr);
  if (early == nullptr || early_op_ != op || early_seq_ != ctx.seq) {
    PublishBuffer(buffer);
    return steps_->Step(ctx);
  }
  if (early != buffer) {
    // The peers copy to or from the published buffer: never a wrong one.
    return steps_->FailGroup(absl::InternalError(
        absl::StrCat(ctx.Describe(), " (", steps_->names().Here(steps_->rank()),
                     "): the buffer published with the signature is not the "
                     "operation's")));
  }
  return absl::OkStatus();
}

absl::Status SingleCopyPath::CopyWithPeer(const OpContext& ctx, int r,
                                          size_t offset, void* local,
                                          size_t bytes, bool write) {
  if (bytes == 0) return absl::OkStatus();
  ShmRankHeader* mine = steps_->layout().header(steps_->rank());
  const ShmRankHeader* h = steps_->layout().header(r);
  // Say so before reading r's address, and read it after (both seq_cst, as
  // r's retraction and its look at this word in Leave): either r sees this
  // copy coming and waits for it, or this copy sees the address gone.
  mine->copying_with.store(static_cast<uint32_t>(r) + 1);
  const uint64_t base = h->buffer.load();
  absl::Status copied;
  bool retracted = false;
  if (base == kRetractedBuffer) {
    // r left the operation with an error before this copy (its own, or
    // another's: a peer that exited, the deadline, an abort). This rank
    // will not arrive either; the mark names r, weakly: a rank whose own
    // operation failed replaces it, and a rank that exited is named first
    // (ShmSteps::MarkRetractedBy).
    retracted = true;
    steps_->MarkRetractedBy(r);
    copied = absl::UnavailableError(
        "the peer retracted its buffer: it left the operation with an error");
  } else if (base == 0) {
    // r published nothing for this operation: its call went another way
    // (or disagreed with this rank's). Not r's failure: this rank's copy
    // is what cannot be done.
    copied = absl::FailedPreconditionError(
        "the peer published no buffer for this operation (its call went "
        "another way?)");
  } else {
    if (test_hook_ != nullptr) copied = test_hook_->InWindow(r, write);
    if (copied.ok()) {
      char* remote = reinterpret_cast<char*>(base) + offset;
      const int pid = h->liveness.pid.load();
      copied = write ? WritePeerMemory(pid, remote, local, bytes)
                     : ReadPeerMemory(pid, remote, local, bytes);
    }
  }
  mine->copying_with.store(0, std::memory_order_release);
  if (!copied.ok()) {
    absl::Status failed = absl::UnavailableError(absl::StrCat(
        ctx.Describe(), " (", steps_->names().Here(steps_->rank()),
        "): ", write ? "writing" : "reading", " ", steps_->names().Rank(r),
        "'s buffer failed (", copied.message(), "); a peer failed"));
    if (retracted) failed.SetPayload(kPeerRetractedPayload, absl::Cord());
    return failed;
  }
  return absl::OkStatus();
}

absl::Status SingleCopyPath::Fail(absl::Status why) {
  if (why.GetPayload(kPeerRetractedPayload).has_value()) {
    // The group is marked already, naming the owner (CopyWithPeer).
    why.ErasePayload(kPeerRetractedPayload);
    return why;
  }
  return steps_->FailGroup(std::move(why));
}

absl::Status SingleCopyPath::Leave(const OpContext& ctx, absl::Status status) {
  if (status.ok()) return status;
  early_buffer_ = nullptr;
  // Whatever failed, a peer may still copy with this rank's buffer (its own
  // part went well, and it has not reached the step this rank left): no
  // new copy may start, and the ones in flight must end before the caller
  // frees or reuses the buffer.
  steps_->layout().header(steps_->rank())->buffer.store(kRetractedBuffer);
  const Stragglers held = AwaitCopiers(ctx);
  if (held.ranks.empty()) return status;
  // The one case where the buffer may be touched after this returns. The
  // code stays the operation's (callers classify by it: a timeout, an
  // abort, a peer's failure); the payload says it without the message.
  std::vector<std::string> names;
  for (int r : held.ranks) names.push_back(steps_->names().Rank(r));
  absl::Status in_use(
      status.code(),
      absl::StrCat(
          status.message(), "; ", absl::StrJoin(names, ", "),
          held.ranks.size() == 1 ? " was" : " were",
          " still copying to or from this rank's buffer ",
          held.aborted
              ? "when the group was aborted (stopped, or without a heartbeat)"
              : absl::StrCat(
                    absl::FormatDuration(std::clamp(
                        ctx.timeout, kRetractWaitMin, kRetractWaitMax)),
                    " after it was retracted (stopped?)"),
          ": the buffer may still be read or written after this call "
          "returned; keep it allocated and do not trust its contents"));
  status.ForEachPayload(
      [&in_use](absl::string_view type, const absl::Cord& payload) {
        in_use.SetPayload(type, payload);
      });
  in_use.SetPayload(kBufferStillInUsePayload,
                    absl::Cord(absl::StrJoin(held.ranks, ",")));
  return in_use;
}

SingleCopyPath::Stragglers SingleCopyPath::AwaitCopiers(const OpContext& ctx) {
  const ShmLayout& layout = steps_->layout();
  const uint32_t me = static_cast<uint32_t>(steps_->rank()) + 1;
  // A bound of its own, not what is left of the operation's deadline: this
  // wait follows the operation's failure, often that deadline itself, and a
  // copier must get time to finish before the caller may free the buffer.
  // One bound for every copier, once per operation (Leave runs once).
  const absl::Duration bound =
      std::clamp(ctx.timeout, kRetractWaitMin, kRetractWaitMax);
  Stragglers held;
  bool timed = false;
  absl::Time deadline;
  for (int r = 0; r < steps_->size(); ++r) {
    if (r == steps_->rank()) continue;
    const ShmRankHeader* h = layout.header(r);
    PeerWatch watch;
    absl::Time next_look;
    // A copy in flight is one process_vm call (a piece of at most a slice):
    // microseconds, so yield a while before reading the clock and sleeping.
    for (int polls = 0; h->copying_with.load() == me; ++polls) {
      if (polls < 100) {
        sched_yield();
        continue;
      }
      const absl::Time now = absl::Now();
      if (!timed) {
        timed = true;
        deadline = now + bound;
      }
      if (now >= next_look) {
        next_look = now + kCopierLookInterval;
        // An exited rank copies nothing more: the wait for it is over.
        std::optional<PeerGone> gone = watch.Gone(h->liveness);
        if (gone && gone->exited) break;
        // After an abort the owner does not wait out a copier that cannot
        // be running its copy now (stopped, or without a heartbeat), and
        // says that the buffer is not free. One that can (running, or
        // runnable but descheduled on a loaded host) is waited for as
        // without an abort: the caller may free the buffer on return.
        if (steps_->aborted() && (gone || PeerStopped(h->liveness))) {
          held.aborted = true;
          held.ranks.push_back(r);
          break;
        }
      }
      // A stopped or frozen rank may copy once continued: it is waited for
      // until the bound.
      if (now > deadline) {
        held.ranks.push_back(r);
        break;
      }
      absl::SleepFor(absl::Microseconds(200));
    }
  }
  return held;
}

absl::Status SingleCopyPath::ReadPeer(const OpContext& ctx, int r,
                                      size_t offset, void* local,
                                      size_t bytes) {
  return CopyWithPeer(ctx, r, offset, local, bytes, /*write=*/false);
}

absl::Status SingleCopyPath::WritePeer(const OpContext& ctx, int r,
                                       size_t offset, const void* local,
                                       size_t bytes) {
  // Not written through: WritePeerMemory only reads `local`.
  return CopyWithPeer(ctx, r, offset, const_cast<void*>(local), bytes,
                      /*write=*/true);
}

char* SingleCopyPath::CopyScratch(size_t bytes) {
  if (copy_scratch_.size() < bytes) copy_scratch_.resize(bytes);
  return copy_scratch_.data();
}

absl::Status SingleCopyPath::FoldPeers(const OpContext& ctx, ReduceFn fn,
                                       size_t offset, size_t bytes, size_t elem,
                                       const char* own, char* out,
                                       bool write_back) {
  const int rank = steps_->rank();
  const int size = steps_->size();
  const size_t piece = kFoldPieceBytes / elem * elem;
  char* acc = CopyScratch(2 * piece);
  char* theirs = acc + piece;
  for (size_t at = 0; at < bytes; at += piece) {
    const size_t len = std::min(piece, bytes - at);
    const char* running = own + at;
    if (rank != 0) {
      DK_RETURN_IF_ERROR(ReadPeer(ctx, 0, offset + at, acc, len));
      running = acc;
    }
    for (int r = 1; r < size; ++r) {
      const char* next = own + at;
      if (r != rank) {
        DK_RETURN_IF_ERROR(ReadPeer(ctx, r, offset + at, theirs, len));
        next = theirs;
      }
      // The last fold writes the result; the ones before, the accumulator.
      char* into = r == size - 1 ? out + at : acc;
      fn(into, running, next, len / elem);
      running = acc;
    }
    for (int r = 0; write_back && r < size; ++r) {
      if (r != rank) {
        DK_RETURN_IF_ERROR(WritePeer(ctx, r, offset + at, out + at, len));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace distkit
