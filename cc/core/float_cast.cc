#include "cc/core/float_cast.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cc/core/half.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

double Load(const void* p, DataType dtype, size_t i) {
  switch (dtype) {
    case DataType::kFloat16:
      return Float16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    default:
      return static_cast<const double*>(p)[i];
  }
}

void Store(void* p, DataType dtype, size_t i, double v) {
  switch (dtype) {
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToFloat16(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    default:
      static_cast<double*>(p)[i] = v;
  }
}

absl::Status CheckFloat(DataType dtype, const char* what) {
  if (IsFloatingPoint(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " is ", DataTypeName(dtype), "; only floating types convert"));
}

}  // namespace

absl::Status CastFloats(const void* src, DataType src_dtype, void* dst,
                        DataType dst_dtype, size_t n) {
  DK_RETURN_IF_ERROR(CheckFloat(src_dtype, "source"));
  DK_RETURN_IF_ERROR(CheckFloat(dst_dtype, "destination"));
  if (src_dtype == dst_dtype) {
    if (src != dst) std::memmove(dst, src, n * ElementSize(src_dtype));
    return absl::OkStatus();
  }
  if (src_dtype == DataType::kFloat32 && dst_dtype == DataType::kFloat64) {
    const float* s = static_cast<const float*>(src);
    double* d = static_cast<double*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = s[i];
    return absl::OkStatus();
  }
  // Narrowing from float64 rounds once, through float for the half types
  // (as torch does); the rest go through float exactly.
  for (size_t i = 0; i < n; ++i)
    Store(dst, dst_dtype, i, Load(src, src_dtype, i));
  return absl::OkStatus();
}

absl::Status AddFloats(const void* src, DataType src_dtype, void* dst,
                       DataType dst_dtype, size_t n) {
  DK_RETURN_IF_ERROR(CheckFloat(src_dtype, "source"));
  DK_RETURN_IF_ERROR(CheckFloat(dst_dtype, "destination"));
  if (src_dtype == DataType::kFloat32 && dst_dtype == DataType::kFloat32) {
    const float* s = static_cast<const float*>(src);
    float* d = static_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] += s[i];
    return absl::OkStatus();
  }
  for (size_t i = 0; i < n; ++i) {
    const double sum = Load(dst, dst_dtype, i) + Load(src, src_dtype, i);
    Store(dst, dst_dtype, i,
          dst_dtype == DataType::kFloat64
              ? sum
              : static_cast<double>(static_cast<float>(sum)));
  }
  return absl::OkStatus();
}

}  // namespace distkit
