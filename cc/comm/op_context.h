// OpContext identifies one operation of a group, for error messages and for
// the agreement across ranks: its sequence number (the same on every rank),
// operation, group and deadline.

#ifndef DISTKIT_CC_COMM_OP_CONTEXT_H_
#define DISTKIT_CC_COMM_OP_CONTEXT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc/comm/op_code.h"

namespace distkit {

class FlightRecorder;  // cc/group/flight_recorder.h

// Where this rank's part of a failed operation was on its device, where the
// backend can tell (NCCL): the late-rank diagnosis tells the other ranks.
enum class DevicePlace {
  kUnknown,
  kNotStarted,  // work queued before it on the stream was still running
  kInside,      // its kernels had started (waiting for peers, or slow)
};

struct OpContext {
  uint64_t seq = 0;  // per-group sequence number, same on every rank
  OpCode op = OpCode::kBarrier;
  // A view, not a copy (a context is made for every operation): the group's
  // name outlives its operations.
  absl::string_view group_name;  // "world", "world/1"
  absl::Duration timeout = absl::Minutes(30);
  // The operation's deadline when a backend built of others (hierarchical)
  // fixed it for its parts, so that its stages on each part (the host's
  // shared memory, the leaders' Gloo, on whatever thread) share one
  // deadline; InfiniteFuture otherwise, and each backend counts `timeout`
  // from its own first wait that reads the clock. The Gloo and
  // shared-memory backends (a hierarchical group's parts) honour it.
  absl::Time deadline = absl::InfiniteFuture();
  // The group's flight recorder and this operation's record in it (set
  // while the operation runs; null in contexts made outside a group).
  FlightRecorder* recorder = nullptr;
  uint64_t record_id = 0;
  // Where the caller's asynchronous device work stood when the operation was
  // issued (Backend::MarkIssue); null when there is none to follow.
  void* issue_mark = nullptr;
  // Set by the group while the operation runs: a backend that learns where
  // this rank's part of a failed operation was before it can return (NCCL,
  // whose stream must drain first, which may take long) tells the group's
  // roll call at once through it, so the other ranks hear it in time.
  void (*answer_roll_call)(void* group, const OpContext& ctx,
                           DevicePlace place) = nullptr;
  void* roll_call_group = nullptr;

  // "all_reduce".
  absl::string_view op_name() const { return OpCodeName(op); }
  // "all_reduce #12 on group 'world'".
  std::string Describe() const;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_OP_CONTEXT_H_
