// OpSignature is the fixed-size record every rank contributes before a
// collective's data moves: which operation, sequence number, dtype, element
// count, root and reduction. Backends exchange signatures first (Gloo kills a
// process whose receive buffer is smaller than what arrives, so sizes must be
// agreed before data moves) and every rank fails with the same clear error
// when they differ, naming what each rank called.

#ifndef DISTKIT_CC_COMM_OP_SIGNATURE_H_
#define DISTKIT_CC_COMM_OP_SIGNATURE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cc/comm/op_code.h"
#include "cc/comm/op_context.h"
#include "cc/core/reduce_op.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// Plain old data: it travels as bytes between ranks of one build.
struct OpSignature {
  static constexpr uint32_t kMagic = 0xd15c0b17;
  uint32_t magic = kMagic;
  uint32_t op = 0;         // OpCode
  int32_t dtype = -1;      // DataType, or -1
  int32_t root = -1;       // root rank, or -1
  int32_t reduce_op = -1;  // ReduceOp, or -1
  // Backend::PathFor the tensors' device: 0 where the backend has one data
  // path; "cpu:gloo,cuda:nccl" has two, and ranks on different ones would
  // never meet (or meet stale inline payloads).
  int32_t path = 0;
  int64_t count = -1;  // elements each rank contributes, or -1 (uneven)
  uint64_t seq = 0;

  // "all_reduce #3 float32 x4 op=sum" (or "root=1"); `with_path`: then
  // " on cpu" or " on cuda" where the backend has two paths (said only where
  // ranks differ in it).
  std::string Describe(bool with_path = false) const;
};
static_assert(sizeof(OpSignature) == 40, "OpSignature travels as bytes");

// The signature of operation `op` as this rank calls it: `t`'s dtype (or -1
// when there is no tensor), the element count this rank contributes, root
// and reduce op (-1 when they do not apply).
OpSignature MakeSignature(const OpContext& ctx, OpCode op, const TensorRef* t,
                          int64_t count, int root = -1, int reduce_op = -1);

// OK when all signatures equal; otherwise INVALID_ARGUMENT listing each
// distinct call with the ranks that made it, e.g.
//   "ranks disagree on all_reduce #3 on group 'world': rank(s) 0, 2 called
//    all_reduce #3 float32 x4 op=sum; rank(s) 1 called all_reduce #3 float32 x8
//    op=sum"
absl::Status CheckAgreement(const OpContext& ctx,
                            absl::Span<const OpSignature> signatures);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_OP_SIGNATURE_H_
