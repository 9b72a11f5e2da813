// The single-copy path of a same-host group (ShmBackend): instead of two
// copies through the slots, each rank publishes its buffer's address (in
// its header of the segment, with the operation's signature where it can)
// and after a step the peers read or write what they need straight from or
// into it (single_copy.h), while a last step keeps every buffer in place
// until all are done. SingleCopyPath decides where it is taken, probes once
// whether the kernel allows it, publishes buffers and moves bytes between
// this rank and a peer's published buffer; the collectives on it are in
// single_copy_collectives.h.
//
// Which op at which size takes it is measured, not assumed (Prefers): with
// more ranks than the host has cores, only a large all_reduce, gather or
// scatter. DISTKIT_SHM_SINGLE_COPY=1 (in rank 0's environment) takes it for
// every such op from kSingleCopyFromBytes, =0 (any rank's) for none. A rank
// whose read or write fails marks the group failed (ShmSteps::FailGroup),
// so its peers' waits end with an error naming it instead of running to
// the deadline or finishing without it.
//
// No rank leaves a single-copy operation while a peer may still copy into
// or out of its buffer: a copier names the owner in its own header
// (copying_with) before it reads the owner's published address and
// copies, and clears it after; a rank that leaves with an error (Leave,
// whatever failed: its own copy, a step, the deadline, an abort) first
// retracts its address, so that later copies fail ("retracted its
// buffer"; the group is then marked by the owner, weakly: see
// ShmSteps::MarkRetractedBy), then waits until no live peer names it. On
// success the last step already kept every buffer in place until all were
// done. Where that wait ends while a peer still names the buffer (its
// bound, or after an abort a copier that is stopped or has no heartbeat),
// Leave keeps the operation's code and says so in the message and the
// payload kBufferStillInUsePayload: only then may the buffer still be read
// or written after the call returns.

#ifndef DISTKIT_CC_COMM_SHM_SINGLE_COPY_PATH_H_
#define DISTKIT_CC_COMM_SHM_SINGLE_COPY_PATH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc/comm/backend.h"
#include "cc/comm/op_context.h"
#include "cc/comm/op_signature.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/comm/shm/shm_steps.h"
#include "cc/comm/shm/single_copy_test_hook.h"

namespace distkit {

class SingleCopyPath {
 public:
  // `single_copy_everywhere` and `oversubscribed` are rank 0's choices (the
  // segment's GroupHeader), the same on every rank.
  SingleCopyPath(ShmSteps* steps, bool single_copy_everywhere,
                 bool oversubscribed)
      : steps_(steps),
        single_copy_everywhere_(single_copy_everywhere),
        oversubscribed_(oversubscribed),
        test_hook_(SingleCopyTestHook::Make()) {}

  ShmSteps& steps() const { return *steps_; }

  // Whether single copy beats the slots for `op` over `bytes` in this group
  // (the same answer on every rank).
  bool Prefers(OpCode op, size_t bytes) const;
  // DISTKIT_SHM_SINGLE_COPY=1: every op and size that can takes it.
  bool everywhere() const { return single_copy_everywhere_; }
  // Whether `op` over `bytes` reads peers' buffers directly (Prefers, and
  // the kernel allows it: the first operation that would probes, one step,
  // every rank).
  absl::StatusOr<bool> Use(const OpContext& ctx, OpCode op, size_t bytes);

  // ---- Publishing -----------------------------------------------------------

  // The buffer a single-copy `op` will publish, when it may go with the
  // signature: single copy is known to work and this op at this size takes
  // it; else null.
  const void* EarlyBuffer(OpCode op, const InlinePayload& payload) const;
  // This rank's buffer for the peers to read after the next step.
  void PublishBuffer(const void* buffer);
  // What the signature exchange of operation `seq` (an `op`) published on
  // every rank (null: nothing), for that operation alone to take.
  void SetEarly(const void* buffer, OpCode op, uint64_t seq) {
    early_buffer_ = buffer;
    early_op_ = op;
    early_seq_ = seq;
  }
  // Publishes `buffer` for a single-copy `op` and steps, unless the
  // signature exchange of this very operation already published it.
  absl::Status PublishForSingleCopy(const OpContext& ctx, OpCode op,
                                    const void* buffer);
  // Returns `status`, the result of a single-copy operation (or of a
  // signature exchange that published its buffer early). When it is an
  // error, first retracts this rank's published buffer and waits until no
  // peer is copying with it: a peer may still be folding or writing (its
  // own part went well), and the caller may free or reuse the buffer the
  // moment this returns. The wait ends early for a peer that exited. It is
  // bounded by the op's timeout (at least kRetractWaitMin, at most
  // kRetractWaitMax). After Abort() it also ends for a peer that cannot be
  // running its copy now: stopped (every thread in /proc state T or t,
  // PeerStopped) or without a heartbeat (PeerWatch::Gone); a peer that may
  // be running it (running, or runnable but descheduled) is still waited
  // for, up to the bound, whatever the abort.
  // If the wait ends while a peer still names the buffer (the bound, or an
  // abort with a stopped or frozen copier), no promise can be kept: the
  // result then keeps `status`'s code, message and payloads, adds to the
  // message the ranks that may still read or write the buffer ("rank 1 was
  // still copying ...; keep it allocated") and the payload
  // kBufferStillInUsePayload (their ranks, "1,3"). The caller must then
  // keep the buffer's memory allocated (or the process end): a late write
  // into memory reused for something else would corrupt it.
  absl::Status Leave(const OpContext& ctx, absl::Status status);
  static constexpr absl::Duration kRetractWaitMin = absl::Seconds(5);
  static constexpr absl::Duration kRetractWaitMax = absl::Seconds(60);
  // How often the wait looks at a copier's liveness and state.
  static constexpr absl::Duration kCopierLookInterval = absl::Milliseconds(10);
  static constexpr absl::string_view kBufferStillInUsePayload =
      "type.distkit/shm.buffer_still_in_use";

  // The error of a single-copy collective whose own copy failed: `why`
  // after marking the group failed by this rank (ShmSteps::FailGroup),
  // unless the copy found the peer's buffer retracted, where the group is
  // marked already, naming that peer (CopyWithPeer).
  absl::Status Fail(absl::Status why);

  // ---- Moving bytes ---------------------------------------------------------

  // `bytes` at `offset` of the buffer rank r published; UNAVAILABLE naming
  // the op, this rank and r when the kernel refuses.
  absl::Status ReadPeer(const OpContext& ctx, int r, size_t offset, void* local,
                        size_t bytes);
  // `bytes` of `local` to `offset` of the buffer rank r published.
  absl::Status WritePeer(const OpContext& ctx, int r, size_t offset,
                         const void* local, size_t bytes);
  // out[0, bytes) = the rank-order fold of every rank's buffer at `offset`,
  // reading peers piece by piece into scratch (`own` is this rank's part).
  // With `write_back`, each folded piece is also written to `offset` of
  // every peer's buffer while it is still in this core's cache.
  absl::Status FoldPeers(const OpContext& ctx, ReduceFn fn, size_t offset,
                         size_t bytes, size_t elem, const char* own, char* out,
                         bool write_back = false);

 private:
  // Copies between `local` and `offset` of the buffer rank r published.
  // UNAVAILABLE when r has retracted it (Leave): the group is then marked
  // by r (ShmSteps::MarkRetractedBy), and the error carries
  // kPeerRetractedPayload for Fail. UNAVAILABLE, r not marked, when r
  // published no buffer (its call went another way).
  absl::Status CopyWithPeer(const OpContext& ctx, int r, size_t offset,
                            void* local, size_t bytes, bool write);
  // Leave's wait for the peers copying with this rank's buffer.
  struct Stragglers {
    std::vector<int> ranks;  // still copying when the wait was cut short
    bool aborted = false;    // cut short after Abort(), not by the bound
  };
  Stragglers AwaitCopiers(const OpContext& ctx);
  // Between CopyWithPeer and Fail only: removed from what callers see.
  static constexpr absl::string_view kPeerRetractedPayload =
      "type.distkit/shm.peer_retracted";
  char* CopyScratch(size_t bytes);

  ShmSteps* const steps_;
  const bool single_copy_everywhere_;  // DISTKIT_SHM_SINGLE_COPY=1
  const bool oversubscribed_;          // more ranks than CPUs online
  enum class Allowed { kUnknown, kYes, kNo };
  Allowed allowed_ = Allowed::kUnknown;  // the probe's answer
  std::vector<char> copy_scratch_;       // pieces read from peers, folded
  // Published with the signature of operation early_seq_ (an early_op_).
  const void* early_buffer_ = nullptr;
  OpCode early_op_ = OpCode::kBarrier;
  uint64_t early_seq_ = 0;
  // A test program's fault injection (single_copy_test_hook.h); null
  // otherwise.
  std::unique_ptr<SingleCopyTestHook> test_hook_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SINGLE_COPY_PATH_H_
