#include "testing/gpu_sim/sim_numeric.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <type_traits>

namespace dksim {
namespace {

// A binary float format narrower than float: exponent and mantissa bits,
// the bias, whether the all-ones exponent means inf/NaN (IEEE) or only
// S.1111.111 is NaN (e4m3), and whether overflow saturates.
struct Format {
  int ebits, mbits, bias;
  bool ieee;
  bool saturate;
};

constexpr Format kHalf{5, 10, 15, true, false};
constexpr Format kE4M3{4, 3, 7, false, true};
constexpr Format kE5M2{5, 2, 15, true, true};

uint32_t Encode(float value, const Format& f) {
  const uint32_t sign = std::signbit(value) ? 1u << (f.ebits + f.mbits) : 0;
  const uint32_t emax = (1u << f.ebits) - 1;
  const uint32_t mmax = (1u << f.mbits) - 1;
  if (std::isnan(value)) return sign | (emax << f.mbits) | mmax;
  // The largest finite encoding (without the sign).
  const uint32_t max_bits = f.ieee ? (((emax - 1) << f.mbits) | mmax)
                                   : ((emax << f.mbits) | (mmax - 1));
  const uint32_t overflow =
      f.saturate ? max_bits : (f.ieee ? emax << f.mbits : max_bits + 1);
  const double a = std::fabs(static_cast<double>(value));
  if (std::isinf(a)) return sign | overflow;
  if (a == 0) return sign;
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int biased = e - 1 + f.bias;
  uint32_t bits;
  if (biased >= 1) {
    // nearbyint rounds half to even in the default rounding mode.
    double q = std::nearbyint((m * 2 - 1) * (1u << f.mbits));
    if (q == static_cast<double>(1u << f.mbits)) {
      q = 0;
      ++biased;
    }
    bits =
        (static_cast<uint32_t>(biased) << f.mbits) | static_cast<uint32_t>(q);
  } else {
    // Subnormal; rounding up to 1 << mbits lands on the smallest normal.
    bits = static_cast<uint32_t>(
        std::nearbyint(a / std::ldexp(1.0, 1 - f.bias - f.mbits)));
  }
  if (bits > max_bits) bits = overflow;
  return sign | bits;
}

float Decode(uint32_t v, const Format& f) {
  const uint32_t emax = (1u << f.ebits) - 1;
  const uint32_t mmax = (1u << f.mbits) - 1;
  const bool neg = (v >> (f.ebits + f.mbits)) & 1;
  const uint32_t e = (v >> f.mbits) & emax;
  const uint32_t q = v & mmax;
  double out;
  if (f.ieee && e == emax) {
    out = q != 0 ? NAN : INFINITY;
  } else if (!f.ieee && e == emax && q == mmax) {
    out = NAN;
  } else if (e == 0) {
    out = std::ldexp(static_cast<double>(q), 1 - f.bias - f.mbits);
  } else {
    out = std::ldexp(1.0 + static_cast<double>(q) / (1u << f.mbits),
                     static_cast<int>(e) - f.bias);
  }
  return static_cast<float>(neg ? -out : out);
}

// Element codecs: how each type is read into, and written from, the type
// its arithmetic is done in.
template <typename Storage, typename Compute>
struct Plain {
  using C = Compute;
  static constexpr size_t kSize = sizeof(Storage);
  static C Load(const char* p, size_t i) {
    Storage v;
    std::memcpy(&v, p + i * sizeof(Storage), sizeof(v));
    return static_cast<C>(v);
  }
  static void Store(char* p, size_t i, C v) {
    const Storage s = static_cast<Storage>(v);
    std::memcpy(p + i * sizeof(Storage), &s, sizeof(s));
  }
};

template <typename Bits, float (*ToFloat)(Bits), Bits (*FromFloat)(float)>
struct Narrow {
  using C = float;
  static constexpr size_t kSize = sizeof(Bits);
  static C Load(const char* p, size_t i) {
    Bits v;
    std::memcpy(&v, p + i * sizeof(Bits), sizeof(v));
    return ToFloat(v);
  }
  static void Store(char* p, size_t i, C v) {
    const Bits b = FromFloat(v);
    std::memcpy(p + i * sizeof(Bits), &b, sizeof(b));
  }
};

using F16 = Narrow<uint16_t, HalfToFloat, FloatToHalf>;
using BF16 = Narrow<uint16_t, Bf16ToFloat, FloatToBf16>;
using E4M3 = Narrow<uint8_t, E4M3ToFloat, FloatToE4M3>;
using E5M2 = Narrow<uint8_t, E5M2ToFloat, FloatToE5M2>;

template <typename T>
using Int = Plain<T, T>;

// Everything about a dtype in one place: f is called with its codec (through
// which every routine below serves every type) and its name; an invalid
// dtype calls nothing.
template <typename F>
void WithCodec(int dtype, F f) {
  switch (dtype) {
    case ncclInt8:
      return f(Int<int8_t>(), "ncclInt8");
    case ncclUint8:
      return f(Int<uint8_t>(), "ncclUint8");
    case ncclInt32:
      return f(Int<int32_t>(), "ncclInt32");
    case ncclUint32:
      return f(Int<uint32_t>(), "ncclUint32");
    case ncclInt64:
      return f(Int<int64_t>(), "ncclInt64");
    case ncclUint64:
      return f(Int<uint64_t>(), "ncclUint64");
    case ncclFloat16:
      return f(F16(), "ncclFloat16");
    case ncclBfloat16:
      return f(BF16(), "ncclBfloat16");
    case ncclFloat8e4m3:
      return f(E4M3(), "ncclFloat8e4m3");
    case ncclFloat8e5m2:
      return f(E5M2(), "ncclFloat8e5m2");
    case ncclFloat32:
      return f(Plain<float, float>(), "ncclFloat32");
    case ncclFloat64:
      return f(Plain<double, double>(), "ncclFloat64");
  }
}

// a op b (std::plus or std::multiplies); integers wrap, as the device's do
// (signed overflow would be undefined).
template <typename Op, typename T>
T Wrapping(Op op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(
        static_cast<U>(op(static_cast<U>(a), static_cast<U>(b))));
  } else {
    return op(a, b);
  }
}

template <typename T>
T Combine(RedKind op, T acc, T v) {
  switch (op) {
    case RedKind::kSum:
    case RedKind::kAvg:
      return Wrapping(std::plus<>(), acc, v);
    case RedKind::kProd:
      return Wrapping(std::multiplies<>(), acc, v);
    case RedKind::kMax:
      // As NCCL's fmaxf: a NaN loses.
      if constexpr (std::is_integral_v<T>)
        return std::max(acc, v);
      else
        return std::fmax(acc, v);
    case RedKind::kMin:
      if constexpr (std::is_integral_v<T>)
        return std::min(acc, v);
      else
        return std::fmin(acc, v);
  }
  return acc;
}

template <typename Codec>
void Reduce(RedKind op, const char* const* in, int n, char* out, size_t count) {
  using C = typename Codec::C;
  for (size_t i = 0; i < count; ++i) {
    C acc = Codec::Load(in[0], i);
    for (int r = 1; r < n; ++r) acc = Combine(op, acc, Codec::Load(in[r], i));
    // Integers average as NCCL's SumPostDiv: the (wrapped) sum divided.
    if (op == RedKind::kAvg) acc = static_cast<C>(acc / static_cast<C>(n));
    Codec::Store(out, i, acc);
  }
}

}  // namespace

uint16_t FloatToHalf(float f) {
  return static_cast<uint16_t>(Encode(f, kHalf));
}
float HalfToFloat(uint16_t h) { return Decode(h, kHalf); }
uint8_t FloatToE4M3(float f) { return static_cast<uint8_t>(Encode(f, kE4M3)); }
float E4M3ToFloat(uint8_t v) { return Decode(v, kE4M3); }
uint8_t FloatToE5M2(float f) { return static_cast<uint8_t>(Encode(f, kE5M2)); }
float E5M2ToFloat(uint8_t v) { return Decode(v, kE5M2); }

uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40);
  // Round to nearest even on the dropped 16 bits.
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

float Bf16ToFloat(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

size_t TypeSize(int dtype) {
  size_t size = 0;
  WithCodec(dtype, [&size](auto codec, const char*) {
    size = decltype(codec)::kSize;
  });
  return size;
}

const char* TypeName(int dtype) {
  const char* name = "an invalid ncclDataType_t";
  WithCodec(dtype, [&name](auto, const char* n) { name = n; });
  return name;
}

void ReduceInto(int dtype, RedKind op, const char* const* in, int n, char* out,
                size_t count) {
  WithCodec(dtype, [&](auto codec, const char*) {
    Reduce<decltype(codec)>(op, in, n, out, count);
  });
}

void Scale(int dtype, const char* scalar, const char* in, char* out,
           size_t count) {
  WithCodec(dtype, [&](auto codec, const char*) {
    using Codec = decltype(codec);
    const auto s = Codec::Load(scalar, 0);
    for (size_t i = 0; i < count; ++i)
      Codec::Store(out, i,
                   Wrapping(std::multiplies<>(), Codec::Load(in, i), s));
  });
}

}  // namespace dksim
