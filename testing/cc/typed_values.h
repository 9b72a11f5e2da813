// Test values of any dtype distkit reduces, read and written as doubles, and
// the reduction of every rank's values computed without the library: what
// the multi-rank tests compare the library's results with. Header-only, so
// that tools/gpu_check (built without Bazel) can use it too.

#ifndef DISTKIT_TESTING_CC_TYPED_VALUES_H_
#define DISTKIT_TESTING_CC_TYPED_VALUES_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cc/core/data_type.h"
#include "cc/core/half.h"
#include "cc/core/reduce_op.h"

namespace distkit {
namespace testing {

namespace typed_values_internal {
template <typename T>
void Put(void* base, int64_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &v, sizeof(T));
}
template <typename T>
T Take(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
}  // namespace typed_values_internal

// Element i of the `dtype` array at `base` = v (half types round to nearest
// even, bool is v != 0).
inline void SetElement(void* base, DataType dtype, int64_t i, double v) {
  using typed_values_internal::Put;
  switch (dtype) {
    case DataType::kFloat16:
      return Put(base, i, FloatToFloat16(static_cast<float>(v)));
    case DataType::kBFloat16:
      return Put(base, i, FloatToBFloat16(static_cast<float>(v)));
    case DataType::kFloat32:
      return Put(base, i, static_cast<float>(v));
    case DataType::kFloat64:
      return Put(base, i, v);
    case DataType::kInt8:
      return Put(base, i, static_cast<int8_t>(v));
    case DataType::kUInt8:
      return Put(base, i, static_cast<uint8_t>(v));
    case DataType::kInt32:
      return Put(base, i, static_cast<int32_t>(v));
    case DataType::kInt64:
      return Put(base, i, static_cast<int64_t>(v));
    case DataType::kBool:
      return Put(base, i, static_cast<uint8_t>(v != 0));
  }
}

// Element i of the `dtype` array at `base`, as a double.
inline double GetElement(const void* base, DataType dtype, int64_t i) {
  using typed_values_internal::Take;
  switch (dtype) {
    case DataType::kFloat16:
      return Float16ToFloat(Take<uint16_t>(base, i));
    case DataType::kBFloat16:
      return BFloat16ToFloat(Take<uint16_t>(base, i));
    case DataType::kFloat32:
      return Take<float>(base, i);
    case DataType::kFloat64:
      return Take<double>(base, i);
    case DataType::kInt8:
      return Take<int8_t>(base, i);
    case DataType::kUInt8:
    case DataType::kBool:
      return Take<uint8_t>(base, i);
    case DataType::kInt32:
      return Take<int32_t>(base, i);
    case DataType::kInt64:
      return static_cast<double>(Take<int64_t>(base, i));
  }
  return 0;
}

// value(r) of every rank r < n reduced by `op`, for values that are exact
// integers: bool reduces as logic (product, min and band: all; bxor: parity;
// the others, kMean included: any); the other dtypes in int64, where kMean
// gives the sum: how the mean divides (truncating for integers, as
// mmengine's; rounded once to the dtype) is the caller's to say.
template <typename ValueOfRank>
double ReduceOverRanks(DataType dtype, ReduceOp op, int n, ValueOfRank value) {
  if (dtype == DataType::kBool) {
    int ones = 0;
    for (int r = 0; r < n; ++r) ones += value(r) != 0;
    switch (op) {
      case ReduceOp::kProduct:
      case ReduceOp::kMin:
      case ReduceOp::kBand:
        return ones == n;
      case ReduceOp::kBxor:
        return ones % 2;
      default:
        return ones > 0;
    }
  }
  int64_t acc = static_cast<int64_t>(value(0));
  for (int r = 1; r < n; ++r) {
    const int64_t v = static_cast<int64_t>(value(r));
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kBand:
        acc &= v;
        break;
      case ReduceOp::kBor:
        acc |= v;
        break;
      case ReduceOp::kBxor:
        acc ^= v;
        break;
    }
  }
  return static_cast<double>(acc);
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_TYPED_VALUES_H_
