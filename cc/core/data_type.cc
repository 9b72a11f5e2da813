#include "cc/core/data_type.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cc/core/enum_names.h"

namespace distkit {

size_t ElementSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kInt8:
    case DataType::kUInt8:
    case DataType::kBool:
      return 1;
  }
  return 0;
}

namespace {

constexpr EnumName<DataType> kDataTypeNames[] = {
    {DataType::kFloat16, "float16"}, {DataType::kBFloat16, "bfloat16"},
    {DataType::kFloat32, "float32"}, {DataType::kFloat64, "float64"},
    {DataType::kInt8, "int8"},       {DataType::kUInt8, "uint8"},
    {DataType::kInt32, "int32"},     {DataType::kInt64, "int64"},
    {DataType::kBool, "bool"}};

// torch's other spellings, accepted by ParseDataType.
constexpr EnumName<DataType> kDataTypeAliases[] = {
    {DataType::kFloat16, "half"},
    {DataType::kFloat32, "float"},
    {DataType::kFloat64, "double"},
    {DataType::kInt32, "int"},
    {DataType::kInt64, "long"}};

}  // namespace

absl::string_view DataTypeName(DataType dtype) {
  return NameIn(kDataTypeNames, dtype, "invalid");
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  std::optional<DataType> dtype = ValueIn(kDataTypeNames, lower);
  if (!dtype.has_value()) dtype = ValueIn(kDataTypeAliases, lower);
  if (dtype.has_value()) return *dtype;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", name, "'"));
}

absl::StatusOr<DataType> DataTypeFromInt(int32_t value) {
  if (value < 0 || value > static_cast<int32_t>(DataType::kBool)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype code ", value, " (valid: 0..8)"));
  }
  return static_cast<DataType>(value);
}

bool IsFloatingPoint(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ||
         dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

bool IsIntegral(DataType dtype) {
  return dtype == DataType::kInt8 || dtype == DataType::kUInt8 ||
         dtype == DataType::kInt32 || dtype == DataType::kInt64;
}

absl::StatusOr<DataType> DataTypeFromDLPack(DLDataType dl) {
  if (dl.lanes != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("vector dtypes are not supported (lanes=", dl.lanes, ")"));
  }
  switch (dl.code) {
    case kDLFloat:
      if (dl.bits == 16) return DataType::kFloat16;
      if (dl.bits == 32) return DataType::kFloat32;
      if (dl.bits == 64) return DataType::kFloat64;
      break;
    case kDLBfloat:
      if (dl.bits == 16) return DataType::kBFloat16;
      break;
    case kDLInt:
      if (dl.bits == 8) return DataType::kInt8;
      if (dl.bits == 32) return DataType::kInt32;
      if (dl.bits == 64) return DataType::kInt64;
      break;
    case kDLUInt:
      if (dl.bits == 8) return DataType::kUInt8;
      // DLPack 0.6 has no bool code. distkit's convention is (kDLUInt, 1 bit);
      // torch 1.13 exports bool as (kDLUInt, 8), which reads as uint8, so
      // bindings pass bool tensors with an explicit dtype.
      if (dl.bits == 1) return DataType::kBool;
      break;
#ifdef DLPACK_VERSION
#if DLPACK_VERSION >= 80
    case kDLBool:
      if (dl.bits == 8) return DataType::kBool;
      break;
#endif
#endif
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported DLPack dtype (code=", dl.code, ", bits=", dl.bits, ")"));
}

DLDataType ToDLPack(DataType dtype) {
  DLDataType dl;
  dl.lanes = 1;
  dl.bits = static_cast<uint8_t>(ElementSize(dtype) * 8);
  switch (dtype) {
    case DataType::kFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64:
      dl.code = kDLFloat;
      break;
    case DataType::kBFloat16:
      dl.code = kDLBfloat;
      break;
    case DataType::kInt8:
    case DataType::kInt32:
    case DataType::kInt64:
      dl.code = kDLInt;
      break;
    case DataType::kUInt8:
      dl.code = kDLUInt;
      break;
    case DataType::kBool:
      // DLPack 0.6 has no bool code; see DataTypeFromDLPack.
      dl.code = kDLUInt;
      dl.bits = 1;
      break;
  }
  return dl;
}

}  // namespace distkit
