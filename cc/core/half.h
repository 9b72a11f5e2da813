// float16 (IEEE binary16) and bfloat16 conversions to and from float, with
// round-to-nearest-even, for the CPU reduction kernels. Reductions on half
// types compute in float and round once per element, as torch's CPU kernels do.

#ifndef DISTKIT_CC_CORE_HALF_H_
#define DISTKIT_CC_CORE_HALF_H_

#include <cstdint>

#include "absl/base/casts.h"

namespace distkit {

inline float BFloat16ToFloat(uint16_t h) {
  return absl::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t FloatToBFloat16(float f) {
  const uint32_t bits = absl::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return absl::bit_cast<float>(bits);
}

inline uint16_t FloatToFloat16(float f) {
  const uint32_t bits = absl::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x47800000u) return sign | 0x7c00u;  // overflow -> inf
  if (abs < 0x38800000u) {                        // subnormal or zero
    if (abs < 0x33000000u) return sign;           // rounds to zero
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14 + (113 - exp)
    const uint32_t half_ulp = 1u << (shift - 1);
    uint32_t value = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1);
    if (rest > half_ulp || (rest == half_ulp && (value & 1u))) ++value;
    return sign | static_cast<uint16_t>(value);
  }
  // Normal: rebias the exponent, round the mantissa to 10 bits.
  uint32_t value = abs - 0x38000000u;  // (127 - 15) << 23
  const uint32_t rest = value & 0x1fffu;
  value >>= 13;
  if (rest > 0x1000u || (rest == 0x1000u && (value & 1u))) ++value;
  return sign | static_cast<uint16_t>(value);
}

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_HALF_H_
