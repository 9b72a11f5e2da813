#include "cc/comm/shm/shm_steps.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/comm/shm/futex.h"
#include "cc/comm/shm/wait_policy.h"
#include "cc/core/fast_clock.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// A wait first spins (a peer on another core answers within a microsecond),
// then yields for the yield phase (wait_policy.h: 20 ms, none under
// DISTKIT_SHM_WAIT=sleep), then sleeps on the group's futex word in slices
// of kSleepSlice, between which it checks the deadline, an abort and the
// liveness of the ranks that have not arrived.
constexpr int kPureSpins = 256;
constexpr absl::Duration kSleepSlice = absl::Milliseconds(10);
// Liveness looks (which read /proc) every kLivenessInterval. Both grow with
// the group past 32 ranks (to at most 100 ms and 500 ms): hundreds of
// waiting ranks that each wake and look every few milliseconds would take
// the CPU from the ranks they wait for. An abort wakes sleepers at once.
constexpr absl::Duration kLivenessInterval = absl::Milliseconds(20);

absl::Duration ScaledBySize(absl::Duration base, int size, absl::Duration cap) {
  return std::min(cap, base * std::max(1, (size + 31) / 32));
}

}  // namespace

ShmSteps::ShmSteps(const ShmLayout& layout, int rank, RankNames names)
    : layout_(layout),
      rank_(rank),
      names_(std::move(names)),
      watches_(layout.size()),
      yield_phase_(ShmYieldPhase()) {
  // Fault injection for tests: a pause between seeing that a peer has not
  // published a step and asking whether it is alive, which opens the window
  // in which a peer can publish and exit.
  if (const char* pause = std::getenv("DISTKIT_SHM_TEST_LIVENESS_PAUSE_MS")) {
    liveness_pause_ = absl::Milliseconds(std::atoi(pause));
  }
  // And a pause before publishing each step: a rank that progresses through
  // an operation slowly but never stops (op_deadline_multirank_test.cc).
  if (const char* pause = std::getenv("DISTKIT_SHM_TEST_STEP_PAUSE_MS")) {
    step_pause_ = absl::Milliseconds(std::atoi(pause));
  }
}

void ShmSteps::Abort() {
  aborted_ = true;
  // This rank's waits end now (other ranks' sleepers wake spuriously and
  // sleep again). The word changes too: a waiter that read it and saw no
  // abort just before would otherwise sleep through the wake, a whole slice
  // (10-100 ms) late.
  layout_.group()->wake_word.fetch_add(1);
  FutexWakeAll(&layout_.group()->wake_word);
}

absl::Status ShmSteps::FailGroup(absl::Status why) {
  // This rank will not arrive at the step its peers wait at: they must not
  // wait for it until the deadline, nor finish with its part missing. The
  // first such failure is the cause (later ones failed because of it), but
  // it replaces a copier's mark of a retracted buffer (MarkRetractedBy),
  // whose owner may have left for another's reason.
  std::atomic<int32_t>& failed_by = layout_.group()->failed_by;
  int32_t seen = failed_by.load();
  while (seen <= 0 && !failed_by.compare_exchange_weak(seen, rank_ + 1)) {
  }
  WakeAll();
  return why;
}

void ShmSteps::MarkRetractedBy(int r) {
  int32_t none = 0;
  layout_.group()->failed_by.compare_exchange_strong(none, -(r + 1));
  WakeAll();
}

void ShmSteps::WakeAll() {
  layout_.group()->wake_word.fetch_add(1);  // as in Abort()
  FutexWakeAll(&layout_.group()->wake_word);
}

bool ShmSteps::Published(int r, uint64_t step, bool thorough) const {
  const ShmRankHeader* h = layout_.header(r);
  if (h->turns[turn_].step.load(std::memory_order_acquire) >= step) {
    return true;
  }
  // The authoritative count: a peer that stepped in the other turn (ranks
  // whose calls disagreed) is still seen, a few spins late.
  return thorough && h->step.load(std::memory_order_acquire) >= step;
}

bool ShmSteps::AllPublished(uint64_t step, int* first_missing,
                            bool thorough) const {
  // Steps only grow, so the ranks already seen need no second look.
  const int size = layout_.size();
  for (int& r = *first_missing; r < size; ++r) {
    if (r != rank_ && !Published(r, step, thorough)) return false;
  }
  return true;
}

absl::Time ShmSteps::OpDeadline(const OpContext& ctx, absl::Time now) {
  // Fixed by the caller for all of the operation's parts (a hierarchical
  // group's leader: its link stages share it). Read here, at the first
  // wait that reads the clock, so the fast path still reads nothing.
  if (ctx.deadline != absl::InfiniteFuture()) return ctx.deadline;
  // Sequence number 0 is no group operation's (a group's creation barrier,
  // a context made outside a group): nothing tells two of them apart, so
  // each wait has a deadline of its own, as in Gloo.
  if (ctx.seq == 0) return now + ctx.timeout;
  if (op_deadline_.seq != ctx.seq || op_deadline_.op != ctx.op ||
      op_deadline_.timeout != ctx.timeout) {
    op_deadline_.seq = ctx.seq;
    op_deadline_.op = ctx.op;
    op_deadline_.timeout = ctx.timeout;
    op_deadline_.deadline = now + ctx.timeout;
  }
  return op_deadline_.deadline;
}

absl::Status ShmSteps::Step(const OpContext& ctx) {
  if (step_pause_ > absl::ZeroDuration()) absl::SleepFor(step_pause_);
  const uint64_t step = ++step_;
  ShmRankHeader* mine = layout_.header(rank_);
  // The copy in this turn's line is what peers poll (release: this rank's
  // slot writes come with it); the header's own count is what the liveness
  // check, the diagnosis of who is late and eager steps read. The copy
  // first: a peer that sees the count sees the copy too, and so tells a
  // synchronized step from an eager one (CheckChains).
  mine->turns[turn_].step.store(step, std::memory_order_release);
  mine->step.store(step, std::memory_order_release);
  int first_missing = 0;
  DK_RETURN_IF_ERROR(Await(
      ctx, step, /*only=*/-1, /*eager_receive=*/false, [&](bool thorough) {
        return AllPublished(step, &first_missing, thorough);
      }));
  acked_ = step;
  // Every rank has published this step: wake whoever sleeps on it. Done
  // after the wait, not between publishing and polling, so the fence costs
  // nothing on the way to the peers' lines (this rank's own line is long
  // written by now).
  WakeSleepers();
  return absl::OkStatus();
}

void ShmSteps::WakeSleepers() {
  // Against a sleeper's count-then-look, seq_cst on both sides: either it
  // saw this rank's step (and does not sleep) or this rank sees it counted
  // here.
  ShmGroupHeader* g = layout_.group();
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g->sleepers.load(std::memory_order_relaxed) != 0) {
    g->wake_word.fetch_add(1);
    FutexWakeAll(&g->wake_word);
  }
}

template <typename Ready>
absl::Status ShmSteps::Await(const OpContext& ctx, uint64_t step, int only,
                             bool eager_receive, Ready ready) {
  ShmGroupHeader* g = layout_.group();
  // The clock is first read when the pure spins are over: a wait that
  // completes while spinning (the common case for small operations on free
  // cores) reads it not at all. The operation's deadline counts from the
  // first such read among its steps, under a microsecond late; its later
  // steps share it (OpDeadline).
  bool timed = false;
  absl::Time deadline, next_liveness, sleep_from;
  absl::Duration slice, liveness_interval;
  for (uint64_t spins = 0; !ready(timed); ++spins) {
    if (spins < kPureSpins) continue;
    const absl::Time now = FastNow();
    if (!timed) {
      timed = true;
      slice = ScaledBySize(kSleepSlice, size(), absl::Milliseconds(100));
      liveness_interval =
          ScaledBySize(kLivenessInterval, size(), absl::Milliseconds(500));
      deadline = OpDeadline(ctx, now);
      next_liveness = now + liveness_interval;
      sleep_from = now + yield_phase_;
    }
    if (now < sleep_from) {
      sched_yield();
      if ((spins & 63) != 0) continue;
    } else {
      // One word for the whole group: a sleeper wakes at each arrival and
      // looks again (sleeping starts only after the yield phase).
      g->sleepers.fetch_add(1);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const uint32_t seen = g->wake_word.load();
      if (!ready(/*thorough=*/true) && !aborted_ && g->failed_by.load() == 0) {
        FutexWait(&g->wake_word, seen, slice);
      }
      g->sleepers.fetch_sub(1);
    }
    if (aborted_) {
      return absl::CancelledError(
          absl::StrCat(ctx.Describe(), ": the group was aborted"));
    }
    if (const int32_t failed = g->failed_by.load()) {
      // An eager receiver whose sender published before another receiver
      // failed the group has what it waited for: its call completes, and
      // its next one fails.
      if (eager_receive && ready(/*thorough=*/true)) break;
      return GroupFailed(ctx, step, failed);
    }
    if (now > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          ctx.Describe(), " (", names_.Here(rank_), "): timed out after ",
          absl::FormatDuration(ctx.timeout), " waiting for peers"));
    }
    if (now > next_liveness) {
      next_liveness = now + liveness_interval;
      absl::Status alive =
          only >= 0 ? LateRankGone(ctx, only, step) : CheckLateRanks(ctx, step);
      if (!alive.ok()) return alive;
    }
  }
  return absl::OkStatus();
}

absl::Status ShmSteps::AwaitAll(const OpContext& ctx, uint64_t step) {
  if (acked_ >= step) return absl::OkStatus();
  // The header's own counts: eager steps leave the turns' copies alone.
  int first_missing = 0;
  DK_RETURN_IF_ERROR(
      Await(ctx, step, /*only=*/-1, /*eager_receive=*/false, [&](bool) {
        return AllPublished(step, &first_missing,
                            /*thorough=*/true);
      }));
  uint64_t least = step_;
  for (int r = 0; r < size(); ++r) {
    least = std::min(least,
                     layout_.header(r)->step.load(std::memory_order_acquire));
  }
  acked_ = std::max(step, least);
  return absl::OkStatus();
}

absl::Status ShmSteps::AwaitEntry(const OpContext& ctx, uint64_t step, int r,
                                  bool* other_way) {
  const ShmRankHeader* h = layout_.header(r);
  const ShmRankHeader::Turn& entry = *layout_.eager(r, step);
  *other_way = false;
  return Await(
      ctx, step, /*only=*/r, /*eager_receive=*/true, [&](bool thorough) {
        // The entry's line is the one polled (its sender writes it before
        // publishing); a sender that took this step as a synchronized one
        // never writes it, and is seen by its count, a few spins late.
        if (entry.step.load(std::memory_order_acquire) >= step) return true;
        if (thorough && h->step.load(std::memory_order_acquire) >= step &&
            entry.step.load(std::memory_order_acquire) < step) {
          *other_way = true;
          return true;
        }
        return false;
      });
}

absl::Status ShmSteps::Ended(const OpContext& ctx) {
  if (aborted_) {
    return absl::CancelledError(
        absl::StrCat(ctx.Describe(), ": the group was aborted"));
  }
  if (const int32_t failed = layout_.group()->failed_by.load()) {
    return GroupFailed(ctx, step_ + 1, failed);
  }
  return absl::OkStatus();
}

uint64_t ShmSteps::PublishAlone() {
  if (step_pause_ > absl::ZeroDuration()) absl::SleepFor(step_pause_);
  const uint64_t step = ++step_;
  layout_.header(rank_)->step.store(step, std::memory_order_release);
  WakeSleepers();
  return step;
}

absl::Status ShmSteps::GroupFailed(const OpContext& ctx, uint64_t step,
                                   int32_t failed) {
  // A rank that exited before this step is the likelier cause than the one
  // marked (whose own wait may have ended at that exit, without a mark:
  // CheckLateRanks), so it is named first. One look at each late rank,
  // once per failed wait.
  if (absl::Status alive = CheckLateRanks(ctx, step, /*all=*/true);
      !alive.ok()) {
    return alive;
  }
  if (failed > 0) {
    return absl::UnavailableError(
        absl::StrCat(ctx.Describe(), " (", names_.Here(rank_),
                     "): ", names_.Rank(failed - 1),
                     " failed inside the operation and left the group"));
  }
  return absl::UnavailableError(absl::StrCat(
      ctx.Describe(), " (", names_.Here(rank_), "): ", names_.Rank(-failed - 1),
      " left the operation with an error (it retracted its single-copy "
      "buffer while a peer still had to copy with it), so the peer left "
      "too"));
}

absl::Status ShmSteps::CheckLateRanks(const OpContext& ctx, uint64_t step,
                                      bool all) {
  if (liveness_pause_ > absl::ZeroDuration()) {
    absl::SleepFor(liveness_pause_);
  }
  const int size = layout_.size();
  if (all) {
    for (int r = 0; r < size; ++r) {
      if (r == rank_) continue;
      ShmRankHeader* h = layout_.header(r);
      if (h->step.load(std::memory_order_acquire) >= step) continue;
      if (absl::Status st = LateRankGone(ctx, r, step); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  // A liveness look reads /proc: one look per interval at the first rank
  // that has not arrived (the one this rank would wait for in rank order)
  // and one at the next missing rank in turn, not one at every missing
  // rank, which at hundreds of ranks costs more than the wait itself.
  int late = -1;
  for (int r = 0; r < size; ++r) {
    if (r != rank_ &&
        layout_.header(r)->step.load(std::memory_order_acquire) < step) {
      late = r;
      break;
    }
  }
  int rotating = -1;
  for (int i = 1; late >= 0 && i <= size; ++i) {
    const int r = (liveness_cursor_ + i) % size;
    if (r != rank_ && r != late &&
        layout_.header(r)->step.load(std::memory_order_acquire) < step) {
      rotating = r;
      break;
    }
  }
  if (rotating >= 0) liveness_cursor_ = rotating;
  for (int r : {late, rotating}) {
    if (r < 0) continue;
    if (absl::Status st = LateRankGone(ctx, r, step); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status ShmSteps::LateRankGone(const OpContext& ctx, int r,
                                    uint64_t step) {
  ShmRankHeader* h = layout_.header(r);
  std::optional<PeerGone> gone = watches_[r].Gone(h->liveness);
  // A peer that has left is a failure only if this step still needs it:
  // one that published the step and then exited did its part.
  if (gone && h->step.load(std::memory_order_acquire) < step) {
    return absl::UnavailableError(
        absl::StrCat(ctx.Describe(), " (", names_.Here(rank_),
                     "): ", names_.Rank(r), " ", gone->why,
                     " before it reached this operation's step; a peer "
                     "failed"));
  }
  return absl::OkStatus();
}

}  // namespace distkit
