#include "cc/core/reduce_op.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace distkit {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kBand:
      return "band";
    case ReduceOp::kBor:
      return "bor";
    case ReduceOp::kBxor:
      return "bxor";
    case ReduceOp::kMean:
      return "mean";
  }
  return "invalid";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (ReduceOp op : kAllReduceOps) {
    if (lower == ReduceOpName(op)) return op;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("reduce op should be one of dict_keys(['sum', 'product', "
                   "'min', 'max', 'band', 'bor', 'bxor']), bug got ",
                   name));
}

absl::StatusOr<ReduceOp> ReduceOpFromInt(int32_t value) {
  if (value < 0 || value > static_cast<int32_t>(ReduceOp::kMean)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown reduce op code ", value, " (valid: 0..7)"));
  }
  return static_cast<ReduceOp>(value);
}

absl::Status CheckReduceOpSupported(ReduceOp op, DataType dtype) {
  const bool bitwise =
      op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
  if (bitwise && IsFloatingPoint(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reduce op '", ReduceOpName(op), "' is not defined for dtype ",
        DataTypeName(dtype), " (bitwise ops need an integer or bool dtype)"));
  }
  return absl::OkStatus();
}

}  // namespace distkit
