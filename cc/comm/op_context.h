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

struct OpContext {
  uint64_t seq = 0;  // per-group sequence number, same on every rank
  OpCode op = OpCode::kBarrier;
  // A view, not a copy (a context is made for every operation): the group's
  // name outlives its operations.
  absl::string_view group_name;  // "world", "world/1"
  absl::Duration timeout = absl::Minutes(30);
  // The group's flight recorder and this operation's record in it (set
  // while the operation runs; null in contexts made outside a group).
  FlightRecorder* recorder = nullptr;
  uint64_t record_id = 0;
  // Where the caller's asynchronous device work stood when the operation was
  // issued (Backend::MarkIssue); null when there is none to follow.
  void* issue_mark = nullptr;

  // "all_reduce".
  absl::string_view op_name() const { return OpCodeName(op); }
  // "all_reduce #12 on group 'world'".
  std::string Describe() const;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_OP_CONTEXT_H_
