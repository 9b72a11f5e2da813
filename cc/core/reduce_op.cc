#include "cc/core/reduce_op.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cc/core/enum_names.h"

namespace distkit {

namespace {

constexpr EnumName<ReduceOp> kReduceOpNames[] = {
    {ReduceOp::kSum, "sum"},   {ReduceOp::kProduct, "product"},
    {ReduceOp::kMin, "min"},   {ReduceOp::kMax, "max"},
    {ReduceOp::kBand, "band"}, {ReduceOp::kBor, "bor"},
    {ReduceOp::kBxor, "bxor"}, {ReduceOp::kMean, "mean"}};

}  // namespace

absl::string_view ReduceOpName(ReduceOp op) {
  return NameIn(kReduceOpNames, op, "invalid");
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  if (std::optional<ReduceOp> op =
          ValueIn(kReduceOpNames, absl::AsciiStrToLower(name))) {
    return *op;
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
