//! The 16-bit float element types, kept as bit patterns (reductions on them
//! happen in the library). Conversions from `f32` round to nearest, ties to
//! even, bit for bit as the library's own (cc/core/half.h), so a value a
//! Rust rank converts equals the one a C++ or Python rank gets.

/// IEEE half precision, kept as its bit pattern.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F16(pub u16);

/// bfloat16, kept as its bit pattern.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BF16(pub u16);

const F32_SIGN: u32 = 0x8000_0000;
const F32_INF: u32 = 0x7f80_0000;

impl F16 {
    /// Rounds to the nearest half-precision value, ties to even. Magnitudes
    /// from 65520 up become infinity; NaN becomes the quiet NaN 0x7e00 with
    /// `x`'s sign.
    pub fn from_f32(x: f32) -> F16 {
        let bits = x.to_bits();
        let sign = ((bits & F32_SIGN) >> 16) as u16;
        let magnitude = bits & !F32_SIGN;
        if magnitude > F32_INF {
            return F16(sign | 0x7e00);
        }
        // 2^16 and above: even 65520 (a tie between 65504 and 2^16) is
        // caught below, where rounding carries into the infinity pattern.
        if magnitude >= 0x4780_0000 {
            return F16(sign | 0x7c00);
        }
        if magnitude < 0x3880_0000 {
            // Below 2^-14, the smallest normal half: a subnormal (or zero)
            // whose 10-bit mantissa counts units of 2^-24.
            if magnitude < 0x3300_0000 {
                return F16(sign); // under half of 2^-24
            }
            let exponent = magnitude >> 23;
            let significand = (magnitude & 0x7f_ffff) | 0x80_0000;
            let shift = 126 - exponent; // from f32's 2^-23 units to 2^-24's
            return F16(sign | round_shift_even(significand, shift) as u16);
        }
        // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits
        // to 10; a carry out of the mantissa correctly bumps the exponent.
        F16(sign | round_shift_even(magnitude - ((127 - 15) << 23), 13) as u16)
    }

    pub fn to_f32(self) -> f32 {
        let sign = ((self.0 & 0x8000) as u32) << 16;
        let exp = ((self.0 >> 10) & 0x1f) as u32;
        let mant = (self.0 & 0x3ff) as u32;
        if exp == 0 {
            let v = mant as f32 / 1024.0 * 2f32.powi(-14);
            return if sign != 0 { -v } else { v };
        }
        if exp == 31 {
            return f32::from_bits(sign | F32_INF | (mant << 13));
        }
        f32::from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13))
    }
}

/// `value >> shift`, rounded to nearest with ties to even (1 <= shift < 32).
fn round_shift_even(value: u32, shift: u32) -> u32 {
    let kept = value >> shift;
    let dropped = value & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if dropped > half || (dropped == half && kept & 1 == 1) {
        kept + 1
    } else {
        kept
    }
}

impl BF16 {
    /// Rounds to the nearest bfloat16, ties to even (values past the largest
    /// finite bfloat16 by half a unit or more become infinity); NaN becomes
    /// the quiet NaN 0x7fc0.
    pub fn from_f32(x: f32) -> BF16 {
        let bits = x.to_bits();
        if bits & !F32_SIGN > F32_INF {
            return BF16(0x7fc0);
        }
        BF16(round_shift_even(bits, 16) as u16)
    }

    /// Exact: every bfloat16 is an f32.
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }
}
