// OpCode names one operation of a group: the one identity an operation has,
// carried by its context (OpContext), sent in its signature (OpSignature),
// recorded by the flight recorder and printed in errors by OpCodeName.

#ifndef DISTKIT_CC_COMM_OP_CODE_H_
#define DISTKIT_CC_COMM_OP_CODE_H_

#include <cstdint>

namespace distkit {

// The values travel in signatures between ranks of one build; new ones go at
// the end.
enum class OpCode : uint32_t {
  kAllReduce = 1,
  kBroadcast = 2,
  kReduce = 3,
  kAllGather = 4,
  kGather = 5,
  kScatter = 6,
  kReduceScatter = 7,
  kAllToAll = 8,
  kBarrier = 9,
  kNewGroup = 10,  // a subgroup split from this group's connection
  kSend = 11,
  kRecv = 12,
};

// "all_reduce", "broadcast", ...: the names mmengine's and torch's calls
// have, used in every error.
constexpr const char* OpCodeName(OpCode op) {
  switch (op) {
    case OpCode::kAllReduce:
      return "all_reduce";
    case OpCode::kBroadcast:
      return "broadcast";
    case OpCode::kReduce:
      return "reduce";
    case OpCode::kAllGather:
      return "all_gather";
    case OpCode::kGather:
      return "gather";
    case OpCode::kScatter:
      return "scatter";
    case OpCode::kReduceScatter:
      return "reduce_scatter";
    case OpCode::kAllToAll:
      return "all_to_all";
    case OpCode::kBarrier:
      return "barrier";
    case OpCode::kNewGroup:
      return "new_group";
    case OpCode::kSend:
      return "send";
    case OpCode::kRecv:
      return "recv";
  }
  return "unknown_op";
}

// Sends and receives: numbered apart from the collectives, one lane each.
constexpr bool IsPointToPoint(OpCode op) {
  return op == OpCode::kSend || op == OpCode::kRecv;
}

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_OP_CODE_H_
