// OpCode names one operation of a group: the one identity an operation has,
// carried by its context (OpContext), sent in its signature (OpSignature),
// recorded by the flight recorder and printed in errors by OpCodeName.

#ifndef DISTKIT_CC_COMM_OP_CODE_H_
#define DISTKIT_CC_COMM_OP_CODE_H_

#include <cstdint>

#include "cc/core/enum_names.h"

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

inline constexpr EnumName<OpCode> kOpCodeNames[] = {
    {OpCode::kAllReduce, "all_reduce"},
    {OpCode::kBroadcast, "broadcast"},
    {OpCode::kReduce, "reduce"},
    {OpCode::kAllGather, "all_gather"},
    {OpCode::kGather, "gather"},
    {OpCode::kScatter, "scatter"},
    {OpCode::kReduceScatter, "reduce_scatter"},
    {OpCode::kAllToAll, "all_to_all"},
    {OpCode::kBarrier, "barrier"},
    {OpCode::kNewGroup, "new_group"},
    {OpCode::kSend, "send"},
    {OpCode::kRecv, "recv"}};

// "all_reduce", "broadcast", ...: the names mmengine's and torch's calls
// have, used in every error.
constexpr const char* OpCodeName(OpCode op) {
  return NameIn(kOpCodeNames, op, "unknown_op");
}

// Sends and receives: numbered apart from the collectives, one lane each.
constexpr bool IsPointToPoint(OpCode op) {
  return op == OpCode::kSend || op == OpCode::kRecv;
}

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_OP_CODE_H_
