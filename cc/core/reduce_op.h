// ReduceOp names the reductions of all_reduce / reduce / reduce_scatter, with
// mmengine's names and its case-insensitive lookup. `mean` is a sum followed by
// a division by the group size; on integer data the quotient is truncated
// toward zero, as mmengine's `copy_` of a float result into an int tensor does.
// The enumerator values are part of the C ABI.

#ifndef DISTKIT_CC_CORE_REDUCE_OP_H_
#define DISTKIT_CC_CORE_REDUCE_OP_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cc/core/data_type.h"

namespace distkit {

enum class ReduceOp : int32_t {
  kSum = 0,
  kProduct = 1,
  kMin = 2,
  kMax = 3,
  kBand = 4,
  kBor = 5,
  kBxor = 6,
  kMean = 7,
};

inline constexpr ReduceOp kAllReduceOps[] = {
    ReduceOp::kSum,  ReduceOp::kProduct, ReduceOp::kMin,  ReduceOp::kMax,
    ReduceOp::kBand, ReduceOp::kBor,     ReduceOp::kBxor, ReduceOp::kMean};

// "sum", "product", "min", "max", "band", "bor", "bxor", "mean".
absl::string_view ReduceOpName(ReduceOp op);

// Case-insensitive lookup. An unknown name is INVALID_ARGUMENT with mmengine's
// exact text, typo included:
//   reduce op should be one of dict_keys(['sum', 'product', 'min', 'max',
//   'band', 'bor', 'bxor']), bug got <name>
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// Checks an integer received through the ABI.
absl::StatusOr<ReduceOp> ReduceOpFromInt(int32_t value);

// Whether `op` is defined on `dtype`: bitwise ops need integer or bool data.
// The error names op and dtype.
absl::Status CheckReduceOpSupported(ReduceOp op, DataType dtype);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_REDUCE_OP_H_
