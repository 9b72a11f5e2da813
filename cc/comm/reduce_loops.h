// The elementwise reduction loops behind GetReduceFn (reduce_kernels.h),
// written once and compiled several times: reduce_kernels.cc for the
// baseline instruction set, reduce_kernels_avx2.cc and
// reduce_kernels_avx512.cc for wider vectors (reduce_kernels_isa.h), and
// GetReduceFn picks the widest this CPU runs. The half types gain most
// (reduce_kernels_bench, in cache: float16 0.3 -> 6.4 GB/s through F16C,
// bfloat16 2.7 -> 9.7 with AVX-512); float32 folds of a peer's memory went
// from 8-10 to 14-17 GB/s alone, though the collectives around them, bound
// by their copies, did not measurably change. Every variant computes the same
// IEEE results: elementwise, no reassociation, no fused multiply-add
// (-ffp-contract=off).
//
// Only for those translation units to include. Everything is in an anonymous
// namespace, so each one keeps its own copy of every template: differently
// compiled instances of one inline function must not be merged by the
// linker (a baseline caller could land in the AVX-512 copy). For the same
// reason the loops call no inline function of another namespace that might
// stay out of line (std::min is spelled out); the half conversions of
// cc/core/half.h are inlined, which reduce_kernels_symbols_test checks: the
// wide variants define no symbol but their two entry points.

#ifndef DISTKIT_CC_COMM_REDUCE_LOOPS_H_
#define DISTKIT_CC_COMM_REDUCE_LOOPS_H_

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "cc/comm/reduce_kernels.h"
#include "cc/core/half.h"

namespace distkit {
namespace {  // NOLINT(build/namespaces_headers): one copy per instruction set

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
    return b < a ? b : a;  // std::min, inside this copy
  }
};
struct Max {
  template <typename T>
  static T Apply(T a, T b) {
    return a < b ? b : a;  // std::max, inside this copy
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

#if defined(__F16C__)
// float16 through the F16C conversions, 8 elements at a time: the software
// conversions of cc/core/half.h branch per element and stay scalar (0.4 GB/s
// here). Both round to nearest even; a NaN stays a NaN of the same sign (the
// hardware also keeps its payload). Blocks are converted to float, folded by
// the same Op as every other type, and converted back; out may be a or b, as
// both inputs of a block are read before it is written.
void WidenFloat16(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                  reinterpret_cast<const __m128i*>(in + i))));
  }
  if (i < n) {
    alignas(16) uint16_t tail[8] = {};
    std::memcpy(tail, in + i, (n - i) * sizeof(uint16_t));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_load_si128(
                                  reinterpret_cast<const __m128i*>(tail))));
  }
}

void NarrowFloat16(const float* in, size_t n, uint16_t* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(out + i),
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) {
    alignas(16) uint16_t tail[8];
    _mm_store_si128(
        reinterpret_cast<__m128i*>(tail),
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(out + i, tail, (n - i) * sizeof(uint16_t));
  }
}

template <typename Op>
void Float16(void* out, const void* a, const void* b, size_t n) {
  constexpr size_t kBlock = 512;
  // Room for the last group of 8 past a block's end (WidenFloat16's tail).
  alignas(32) float x[kBlock + 8], y[kBlock + 8];
  const uint16_t* pa = static_cast<const uint16_t*>(a);
  const uint16_t* pb = static_cast<const uint16_t*>(b);
  uint16_t* po = static_cast<uint16_t*>(out);
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t len = n - at < kBlock ? n - at : kBlock;
    WidenFloat16(pa + at, len, x);
    WidenFloat16(pb + at, len, y);
    for (size_t j = 0; j < len; ++j) x[j] = Op::Apply(x[j], y[j]);
    NarrowFloat16(x, len, po + at);
  }
}
#else
template <typename Op>
void Float16(void* out, const void* a, const void* b, size_t n) {
  Half<Float16ToFloat, FloatToFloat16, Op>(out, a, b, n);
}
#endif

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

#if defined(__F16C__)
void DivideFloat16(void* data, size_t n, int divisor) {
  constexpr size_t kBlock = 512;
  alignas(32) float x[kBlock + 8];
  uint16_t* d = static_cast<uint16_t*>(data);
  const float by = static_cast<float>(divisor);
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t len = n - at < kBlock ? n - at : kBlock;
    WidenFloat16(d + at, len, x);
    for (size_t j = 0; j < len; ++j) x[j] = x[j] / by;
    NarrowFloat16(x, len, d + at);
  }
}
#else
void DivideFloat16(void* data, size_t n, int divisor) {
  DivideHalf<Float16ToFloat, FloatToFloat16>(data, n, divisor);
}
#endif

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
      return &Float16<Op>;
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

// The kernel for a supported (dtype, op) pair (CheckReduceOpSupported).
ReduceFn SelectReduceLoop(DataType dtype, ReduceOp op) {
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
  return nullptr;
}

// data[i] /= divisor (reduce_kernels.h, DivideBySize).
void DivideLoop(void* data, DataType dtype, size_t n, int divisor) {
  switch (dtype) {
    case DataType::kFloat16:
      return DivideFloat16(data, n, divisor);
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

}  // namespace
}  // namespace distkit

#endif  // DISTKIT_CC_COMM_REDUCE_LOOPS_H_
