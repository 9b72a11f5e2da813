// The step protocol of a same-host group (ShmBackend), one rank's side.
// A step is: write your part into your slot of this turn, publish the step,
// wait until every rank has published it, read what you need from the
// others' slots, flip the turn. A waiter polls each peer's own line (no
// shared counter that every rank must modify), the line it reads next: a
// small operation's signature and payload come with the step that says they
// are there. Alternating slots per chunk makes one wait per step enough (a
// slot is written again only after every rank has published a later step,
// i.e. finished reading it).
//
// Waiting spins briefly, then yields for up to 20 ms (wait_policy.h), then
// sleeps on a futex the last arrival wakes, and checks the op's deadline
// (DEADLINE_EXCEEDED: one for all the steps of an operation, see Step),
// Abort() (CANCELLED), whether a rank failed inside the operation
// (FailGroup: UNAVAILABLE naming it; MarkRetractedBy: naming the owner of a
// retracted single-copy buffer) and whether the ranks it waits for are
// still alive (UNAVAILABLE, peer_liveness.h: exited, a zombie, or no
// heartbeat), as over TCP; a group marked failed is first looked at for
// such a rank, which is named instead of the marked one. A peer that exits
// after publishing the step waited for is not a failure.

#ifndef DISTKIT_CC_COMM_SHM_SHM_STEPS_H_
#define DISTKIT_CC_COMM_SHM_SHM_STEPS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cc/comm/op_context.h"
#include "cc/comm/rank_names.h"
#include "cc/comm/shm/peer_liveness.h"
#include "cc/comm/shm/shm_segment.h"

namespace distkit {

class ShmSteps {
 public:
  // `names`: how messages name the ranks (cc/comm/rank_names.h).
  ShmSteps(const ShmLayout& layout, int rank, RankNames names = RankNames());

  const ShmLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  const RankNames& names() const { return names_; }
  int size() const { return layout_.size(); }

  // Which of its two slots (and header turns) a chunk uses now.
  int turn() const { return turn_; }
  // After a chunk's slots are read: the next chunk uses the other turn.
  void FlipTurn() { turn_ ^= 1; }
  // Rank r's slot of this turn, for a chunk whose slots hold `bytes`.
  char* slot(int r, size_t bytes) const {
    return layout_.slot(r, bytes, turn_);
  }

  // Publishes this rank's next step (after its slot is written) and waits
  // until every rank has published it, at most until the deadline of the
  // operation `ctx` names: ctx.timeout after the first of its steps that
  // waited long enough to read the clock, shared by every later step of it
  // (a chunked operation takes many), so that peers that progress slowly
  // but never stop cannot stretch it to many times its timeout.
  absl::Status Step(const OpContext& ctx);

  // ---- Eager steps (eager_exchange.h) ----
  // A step whose senders publish without waiting for their receivers: the
  // caller writes its eager entry of the step after step() (once AwaitAll
  // allows), publishes it with PublishAlone, and a receiver waits for its
  // sender's entry with AwaitEntry. Eager steps use neither the turns nor
  // the slots, so they leave the step protocol's own rule alone.

  // The last step this rank published.
  uint64_t step() const { return step_; }
  // Waits until every rank has published at least `step` (before this rank
  // writes an eager entry again: every rank has read what it held), at most
  // until the operation's deadline, as Step waits.
  absl::Status AwaitAll(const OpContext& ctx, uint64_t step);
  // Waits until rank r has published its eager entry of `step`; sets
  // *other_way instead when r published that step but not as an eager one
  // (its call differed from this rank's).
  absl::Status AwaitEntry(const OpContext& ctx, uint64_t step, int r,
                          bool* other_way);
  // The errors a wait would end with at once (an abort, a failed group):
  // an eager sender, which may not wait at all, looks first, so that it
  // does not run on in a group that has ended.
  absl::Status Ended(const OpContext& ctx);
  // Publishes this rank's next step (after its entry is written) without
  // waiting, and wakes whoever sleeps in a wait; returns the step.
  uint64_t PublishAlone();

  // Marks the group failed by this rank, which will not arrive at the step
  // its peers wait at: every peer's wait ends with an error naming it.
  // Among such marks the first is kept (later ones are ranks that failed
  // because of it); it replaces a MarkRetractedBy mark. Returns `why`.
  absl::Status FailGroup(absl::Status why);
  // Marks the group failed because rank r retracted its single-copy buffer
  // while this rank still had to copy with it (so this rank will not arrive
  // either), unless a rank is marked already, and wakes every waiter. A
  // weaker mark than FailGroup's: r left with an error, but not
  // necessarily its own (another rank exited, the deadline, an abort), so
  // a later FailGroup replaces it, and waiters name r only when no rank
  // they wait for has exited (Step).
  void MarkRetractedBy(int r);

  // Makes this rank's waits end now with CANCELLED (callable from any
  // thread).
  void Abort();
  // Whether Abort() was called.
  bool aborted() const { return aborted_.load(); }

 private:
  // Whether rank r has published `step`: the copy in this turn's line (the
  // one cache line a waiter polls), and if `thorough` also the header's own
  // count.
  bool Published(int r, uint64_t step, bool thorough) const;
  // Whether every rank has, looking from *first_missing on (kept across
  // calls of one wait, since steps only grow).
  bool AllPublished(uint64_t step, int* first_missing, bool thorough) const;
  // The first liveness error among the ranks that have not published
  // `step`, looking at two of them (see the .cc), or with `all` at every
  // one of them.
  absl::Status CheckLateRanks(const OpContext& ctx, uint64_t step,
                              bool all = false);
  // Waits until ready(thorough) says so: spins, yields, sleeps on the
  // group's futex word, and between those ends with the deadline of `ctx`,
  // an abort, a failed group or a late rank that is gone (rank `only`'s
  // liveness alone when only >= 0, else every rank that has not published
  // `step`). `thorough`: whether ready should look past the turn's line
  // (the header's own count). `eager_receive`: a failed group ends the wait
  // only if what it waits for has not come.
  template <typename Ready>
  absl::Status Await(const OpContext& ctx, uint64_t step, int only,
                     bool eager_receive, Ready ready);
  // Wakes the sleepers after this rank published or saw a step.
  void WakeSleepers();
  // An error naming late rank r (one that has not published `step`) when
  // it is gone (PeerWatch::Gone).
  absl::Status LateRankGone(const OpContext& ctx, int r, uint64_t step);
  // The deadline of operation `ctx` for a wait that reads the clock first
  // at `now` (see op_deadline_), or ctx.deadline when the caller set it.
  absl::Time OpDeadline(const OpContext& ctx, absl::Time now);
  // Wakes every rank's waits (they look at failed_by and aborts).
  void WakeAll();
  // Step's error once the group is marked failed (`failed`: the group
  // header's failed_by).
  absl::Status GroupFailed(const OpContext& ctx, uint64_t step, int32_t failed);

  const ShmLayout layout_;
  const int rank_;
  const RankNames names_;
  uint64_t step_ = 0;  // this rank's last published step
  // Every rank is known to have published at least this step (AwaitAll's
  // fast path: a scan of every rank's count only when it is not enough).
  uint64_t acked_ = 0;
  int turn_ = 0;
  std::vector<PeerWatch> watches_;  // one per rank, kept across waits
  int liveness_cursor_ = 0;         // the last missing rank looked at in turn
  // The deadline of the operation in progress, fixed by its first step that
  // reads the clock and found again by later steps of the same operation
  // (sequence number, op and timeout, as Gloo keys its own). Kept here, not
  // in the OpContext: callers pass the context const and copy it (the
  // group's recorded copy, a hierarchical backend's parts), and a step that
  // ends in its pure spins, the small operation's fast path, must neither
  // read the clock nor write anything for it; a new operation's key simply
  // replaces the last one's.
  struct {
    uint64_t seq = 0;  // 0: none yet
    OpCode op = OpCode::kBarrier;
    absl::Duration timeout;
    absl::Time deadline;
  } op_deadline_;
  absl::Duration liveness_pause_;  // test-only fault injection
  absl::Duration step_pause_;      // test-only slow-down
  absl::Duration yield_phase_;     // wait_policy.h
  std::atomic<bool> aborted_{false};
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SHM_STEPS_H_
