package distkit

import "math"

// The 16-bit float element types, kept as bit patterns (reductions on them
// happen in the library). Conversions from float32 round to nearest, ties to
// even, bit for bit as the library's own (cc/core/half.h), so a value a Go
// rank converts equals the one a C++ or Python rank gets.

// Float16 is an IEEE half-precision value kept as its bit pattern.
type Float16 uint16

// BFloat16 is a bfloat16 value kept as its bit pattern.
type BFloat16 uint16

const (
	float32Sign     = 0x80000000
	float32Infinity = 0x7f800000
)

// roundShiftEven is value >> shift rounded to nearest, ties to even
// (1 <= shift < 32).
func roundShiftEven(value, shift uint32) uint32 {
	kept := value >> shift
	dropped := value & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if dropped > half || (dropped == half && kept&1 == 1) {
		kept++
	}
	return kept
}

// Float16FromFloat32 rounds to the nearest half-precision value, ties to
// even. Magnitudes from 65520 up become infinity; NaN becomes the quiet NaN
// 0x7e00 with x's sign.
func Float16FromFloat32(x float32) Float16 {
	bits := math.Float32bits(x)
	sign := Float16((bits & float32Sign) >> 16)
	magnitude := bits &^ float32Sign
	switch {
	case magnitude > float32Infinity:
		return sign | 0x7e00
	case magnitude >= 0x47800000:
		// 2^16 and above; 65520 (a tie between 65504 and 2^16) is caught
		// below, where rounding carries into the infinity pattern.
		return sign | 0x7c00
	case magnitude < 0x33000000:
		return sign // under half of the smallest subnormal, 2^-24
	case magnitude < 0x38800000:
		// Below 2^-14, the smallest normal half: a subnormal whose 10-bit
		// mantissa counts units of 2^-24.
		exponent := magnitude >> 23
		significand := magnitude&0x7fffff | 0x800000
		return sign | Float16(roundShiftEven(significand, 126-exponent))
	}
	// Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to
	// 10; a carry out of the mantissa correctly bumps the exponent.
	return sign | Float16(roundShiftEven(magnitude-(127-15)<<23, 13))
}

// Float32 converts back (exactly).
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0:
		v := float32(mant) / 1024 * float32(math.Pow(2, -14))
		if sign != 0 {
			return -v
		}
		return v
	case 31:
		return math.Float32frombits(sign | float32Infinity | mant<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BFloat16FromFloat32 rounds to the nearest bfloat16, ties to even (values
// past the largest finite bfloat16 by half a unit or more become infinity);
// NaN becomes the quiet NaN 0x7fc0.
func BFloat16FromFloat32(x float32) BFloat16 {
	bits := math.Float32bits(x)
	if bits&^float32Sign > float32Infinity {
		return 0x7fc0
	}
	return BFloat16(roundShiftEven(bits, 16))
}

// Float32 converts back (exactly).
func (b BFloat16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }
