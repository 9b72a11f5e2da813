#include "cc/comm/reduce_kernels.h"

#include <algorithm>
#include <cstdint>

#include "cc/core/half.h"

namespace distkit {
namespace {

using comm_internal::BFloat16ToFloat;
using comm_internal::Float16ToFloat;
using comm_internal::FloatToBFloat16;
using comm_internal::FloatToFloat16;

struct Sum {
  template <typename T>
  static T Apply(T a, T b) {
    return a + b;
  }
  // bool sum is logical or.
  static bool Apply(bool a, bool b) { return a || b; }
};
struct Prod {
  template <typename T>
  static T Apply(T a, T b) {
    return a * b;
  }
  // bool product is logical and (spelled out: `*` on bool is an int).
  static bool Apply(bool a, bool b) { return a && b; }
};
struct Min {
  template <typename T>
  static T Apply(T a, T b) {
    return std::min(a, b);
  }
};
struct Max {
  template <typename T>
  static T Apply(T a, T b) {
    return std::max(a, b);
  }
};
struct Band {
  template <typename T>
  static T Apply(T a, T b) {
    return a & b;
  }
};
struct Bor {
  template <typename T>
  static T Apply(T a, T b) {
    return a | b;
  }
};
struct Bxor {
  template <typename T>
  static T Apply(T a, T b) {
    return a ^ b;
  }
};

// Callers pass out == a or out == b (folding in place) or three separate
// buffers, never a partial overlap. One loop that allowed any aliasing would
// stay scalar; a loop per case with restrict pointers is vectorized (the
// library builds this file with -O3). a == b, which no fold passes, takes
// the plain loop.
template <typename T, typename F>
void Separate(T* __restrict o, const T* __restrict x, const T* __restrict y,
              size_t n, F f) {
  for (size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
}
template <typename T, typename F>
void IntoLeft(T* __restrict o, const T* __restrict y, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) o[i] = f(o[i], y[i]);
}
template <typename T, typename F>
void IntoRight(T* __restrict o, const T* __restrict x, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) o[i] = f(x[i], o[i]);
}
template <typename T, typename F>
void Elementwise(void* out, const void* a, const void* b, size_t n, F f) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (a == b) {
    for (size_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
  } else if (out == a) {
    IntoLeft(o, y, n, f);
  } else if (out == b) {
    IntoRight(o, x, n, f);
  } else {
    Separate(o, x, y, n, f);
  }
}

template <typename T, typename Op>
void Plain(void* out, const void* a, const void* b, size_t n) {
  Elementwise<T>(out, a, b, n,
                 [](T x, T y) { return static_cast<T>(Op::Apply(x, y)); });
}

// Integer wrap-around on overflow must not be undefined behaviour: compute in
// the unsigned type for sum and product.
template <typename T, typename U, typename Op>
void Wrapping(void* out, const void* a, const void* b, size_t n) {
  Elementwise<T>(out, a, b, n, [](T x, T y) {
    return static_cast<T>(Op::Apply(static_cast<U>(x), static_cast<U>(y)));
  });
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), typename Op>
void Half(void* out, const void* a, const void* b, size_t n) {
  Elementwise<uint16_t>(out, a, b, n, [](uint16_t x, uint16_t y) {
    return FromFloat(Op::Apply(ToFloat(x), ToFloat(y)));
  });
}

// bool: sum/max = or, product/min = and, band/bor/bxor bitwise on 0/1.
template <typename Op>
void Bool(void* out, const void* a, const void* b, size_t n) {
  Elementwise<uint8_t>(out, a, b, n, [](uint8_t x, uint8_t y) {
    return static_cast<uint8_t>(Op::Apply(x != 0, y != 0) ? 1 : 0);
  });
}

template <typename Op>
ReduceFn ForFloats(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16:
      return &Half<Float16ToFloat, FloatToFloat16, Op>;
    case DataType::kBFloat16:
      return &Half<BFloat16ToFloat, FloatToBFloat16, Op>;
    case DataType::kFloat32:
      return &Plain<float, Op>;
    case DataType::kFloat64:
      return &Plain<double, Op>;
    default:
      return nullptr;
  }
}

template <typename Op, bool kWrap>
ReduceFn ForIntegers(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
      return kWrap ? &Wrapping<int8_t, uint8_t, Op> : &Plain<int8_t, Op>;
    case DataType::kUInt8:
      return &Plain<uint8_t, Op>;
    case DataType::kInt32:
      return kWrap ? &Wrapping<int32_t, uint32_t, Op> : &Plain<int32_t, Op>;
    case DataType::kInt64:
      return kWrap ? &Wrapping<int64_t, uint64_t, Op> : &Plain<int64_t, Op>;
    default:
      return nullptr;
  }
}

template <typename Op, bool kWrap>
ReduceFn For(DataType dtype) {
  if (dtype == DataType::kBool) return &Bool<Op>;
  if (IsFloatingPoint(dtype)) return ForFloats<Op>(dtype);
  return ForIntegers<Op, kWrap>(dtype);
}

template <typename T>
void DivideInts(void* data, size_t n, int divisor) {
  T* d = static_cast<T*>(data);
  // C++ integer division truncates toward zero, like copy_ of a float result.
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / divisor);
}

template <typename T>
void DivideFloats(void* data, size_t n, int divisor) {
  T* d = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = d[i] / static_cast<T>(divisor);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void DivideHalf(void* data, size_t n, int divisor) {
  uint16_t* d = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    d[i] = FromFloat(ToFloat(d[i]) / static_cast<float>(divisor));
  }
}

}  // namespace

absl::StatusOr<ReduceFn> GetReduceFn(DataType dtype, ReduceOp op) {
  absl::Status supported = CheckReduceOpSupported(op, dtype);
  if (!supported.ok()) return supported;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return For<Sum, true>(dtype);
    case ReduceOp::kProduct:
      return For<Prod, true>(dtype);
    case ReduceOp::kMin:
      return For<Min, false>(dtype);
    case ReduceOp::kMax:
      return For<Max, false>(dtype);
    case ReduceOp::kBand:
      return dtype == DataType::kBool ? &Bool<Band>
                                      : ForIntegers<Band, false>(dtype);
    case ReduceOp::kBor:
      return dtype == DataType::kBool ? &Bool<Bor>
                                      : ForIntegers<Bor, false>(dtype);
    case ReduceOp::kBxor:
      return dtype == DataType::kBool ? &Bool<Bxor>
                                      : ForIntegers<Bxor, false>(dtype);
  }
  return absl::InvalidArgumentError("unknown reduce op");
}

void DivideBySize(void* data, DataType dtype, size_t n, int divisor) {
  switch (dtype) {
    case DataType::kFloat16:
      return DivideHalf<Float16ToFloat, FloatToFloat16>(data, n, divisor);
    case DataType::kBFloat16:
      return DivideHalf<BFloat16ToFloat, FloatToBFloat16>(data, n, divisor);
    case DataType::kFloat32:
      return DivideFloats<float>(data, n, divisor);
    case DataType::kFloat64:
      return DivideFloats<double>(data, n, divisor);
    case DataType::kInt8:
      return DivideInts<int8_t>(data, n, divisor);
    case DataType::kUInt8:
      return DivideInts<uint8_t>(data, n, divisor);
    case DataType::kInt32:
      return DivideInts<int32_t>(data, n, divisor);
    case DataType::kInt64:
      return DivideInts<int64_t>(data, n, divisor);
    case DataType::kBool: {
      // true / n is non-zero for any n, so bool stays as it is.
      return;
    }
  }
}

}  // namespace distkit
