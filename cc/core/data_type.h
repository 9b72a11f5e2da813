// DataType names the element types distkit moves and reduces, and maps them to
// and from DLPack's (code, bits, lanes) triples. The enumerator values are part
// of the C ABI (DK_FLOAT16 = 0 ...) and never change.
//
//   DK_ASSIGN_OR_RETURN(DataType dt, DataTypeFromDLPack(tensor->dtype));
//   size_t bytes = numel * ElementSize(dt);

#ifndef DISTKIT_CC_CORE_DATA_TYPE_H_
#define DISTKIT_CC_CORE_DATA_TYPE_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distkit {

enum class DataType : int32_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kFloat64 = 3,
  kInt8 = 4,
  kUInt8 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 8,
};

// Every DataType, in enumerator order (for tests that sweep all of them).
inline constexpr DataType kAllDataTypes[] = {
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
    DataType::kFloat64, DataType::kInt8,     DataType::kUInt8,
    DataType::kInt32,   DataType::kInt64,    DataType::kBool};

// Size of one element in bytes.
size_t ElementSize(DataType dtype);

// Lower-case torch-style name: "float16", "bfloat16", ..., "bool".
absl::string_view DataTypeName(DataType dtype);

// Inverse of DataTypeName; also accepts torch's aliases ("half", "float",
// "double", "long", "int"). INVALID_ARGUMENT names the unknown text.
absl::StatusOr<DataType> ParseDataType(absl::string_view name);

// Checks an integer received through the ABI.
absl::StatusOr<DataType> DataTypeFromInt(int32_t value);

bool IsFloatingPoint(DataType dtype);  // float16, bfloat16, float32, float64
bool IsIntegral(DataType dtype);       // int8, uint8, int32, int64 (not bool)

// DLPack mapping. Vector types (lanes != 1) and other codes are
// INVALID_ARGUMENT.
absl::StatusOr<DataType> DataTypeFromDLPack(DLDataType dl);
DLDataType ToDLPack(DataType dtype);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_DATA_TYPE_H_
