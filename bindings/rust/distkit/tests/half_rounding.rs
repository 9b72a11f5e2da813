//! `F16::from_f32` and `BF16::from_f32` against a reference rounding worked
//! out here from the formats' definitions (not from bit tricks): the two
//! neighbouring values of the format are found by search and compared in
//! exact f64 arithmetic, ties going to the even pattern. Inputs: 10^5
//! pseudo-random bit patterns (every exponent, NaN and infinity included),
//! 10^5 more inside each format's range, and hand-picked ties and values
//! next to overflow and underflow.

/// A binary format with a sign bit, `exponent_bits` and `mantissa_bits`.
#[derive(Clone, Copy)]
struct Format {
    exponent_bits: u32,
    mantissa_bits: u32,
    /// The library's NaN for a NaN input of the given sign.
    nan: fn(negative: bool) -> u16,
    convert: fn(f32) -> u16,
}

// The library keeps a NaN's sign in half precision and drops it in bfloat16.
fn f16_nan(negative: bool) -> u16 {
    if negative {
        0xfe00
    } else {
        0x7e00
    }
}
fn bf16_nan(_negative: bool) -> u16 {
    0x7fc0
}
fn f16_of(x: f32) -> u16 {
    distkit::F16::from_f32(x).0
}
fn bf16_of(x: f32) -> u16 {
    distkit::BF16::from_f32(x).0
}

const F16_FORMAT: Format = Format { exponent_bits: 5, mantissa_bits: 10, nan: f16_nan, convert: f16_of };
const BF16_FORMAT: Format = Format { exponent_bits: 8, mantissa_bits: 7, nan: bf16_nan, convert: bf16_of };

/// 2^k as an f64, built from its fields (exact for -1022 <= k <= 1023).
fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

impl Format {
    fn bias(self) -> i32 {
        (1 << (self.exponent_bits - 1)) - 1
    }
    fn infinity(self) -> u32 {
        ((1 << self.exponent_bits) - 1) << self.mantissa_bits
    }

    /// The value of a non-negative pattern; the infinity pattern gives
    /// 2^(emax + 1), where the next binade would start, which is the value
    /// IEEE rounding compares against for overflow.
    fn value(self, pattern: u32) -> f64 {
        let exponent = (pattern >> self.mantissa_bits) as i32;
        let fraction = (pattern & ((1 << self.mantissa_bits) - 1)) as f64;
        let unit = self.mantissa_bits as i32;
        if exponent == 0 {
            fraction * pow2(1 - self.bias() - unit)
        } else {
            (fraction + pow2(unit)) * pow2(exponent - self.bias() - unit)
        }
    }

    /// Round to nearest, ties to even, by definition.
    fn reference(self, x: f32) -> u16 {
        let sign = if x.is_sign_negative() { 1u32 << (self.exponent_bits + self.mantissa_bits) } else { 0 };
        if x.is_nan() {
            return (self.nan)(x.is_sign_negative());
        }
        if x.is_infinite() {
            return (sign | self.infinity()) as u16;
        }
        let magnitude = (x as f64).abs();
        // The largest finite pattern whose value does not exceed |x|.
        let (mut below, mut above) = (0u32, self.infinity());
        while above - below > 1 {
            let middle = (below + above) / 2;
            if self.value(middle) <= magnitude {
                below = middle;
            } else {
                above = middle;
            }
        }
        let (low, high) = (self.value(below), self.value(below + 1));
        // 2|x| against low + high: both sides are exact in f64.
        let pattern = match (2.0 * magnitude).partial_cmp(&(low + high)).unwrap() {
            std::cmp::Ordering::Less => below,
            std::cmp::Ordering::Greater => below + 1,
            std::cmp::Ordering::Equal => {
                if below % 2 == 0 {
                    below
                } else {
                    below + 1
                }
            }
        };
        (sign | pattern) as u16
    }
}

/// SplitMix64, so the inputs are the same on every run and machine.
struct Random(u64);

impl Random {
    fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u32
    }
}

fn check(format: Format, name: &str, x: f32) {
    let (got, want) = ((format.convert)(x), format.reference(x));
    assert_eq!(got, want, "{name} of {x:e} (f32 bits {:#010x}): got {got:#06x}, want {want:#06x}", x.to_bits());
}

fn check_all(format: Format, name: &str, lowest_exponent: u32, highest_exponent: u32, special: &[u32]) {
    let mut random = Random(0x5eed_f00d_d157_0417);
    for _ in 0..100_000 {
        check(format, name, f32::from_bits(random.next_u32()));
    }
    // Inside the format's range, where most inputs round to a neighbour.
    for _ in 0..100_000 {
        let bits = random.next_u32();
        let exponent = lowest_exponent + bits % (highest_exponent - lowest_exponent + 1);
        check(format, name, f32::from_bits((bits & 0x807f_ffff) | (exponent << 23)));
    }
    for &bits in special {
        check(format, name, f32::from_bits(bits));
        check(format, name, f32::from_bits(bits ^ 0x8000_0000));
    }
}

#[test]
fn bf16_rounds_to_nearest_even() {
    check_all(
        BF16_FORMAT,
        "bf16",
        1,
        254,
        &[
            0x0000_0000, // zero
            0x3f80_8000, // 1 + 2^-8: a tie, down to the even 1
            0x3f81_8000, // 1 + 3 * 2^-8: a tie, up to the even 1 + 2^-6
            0x3f80_8001, // just above the tie: up
            0x3f80_7fff, // just below: down
            0x0000_8000, // half the smallest subnormal: a tie, down to 0
            0x0001_8000, // a subnormal tie, up to the even 2 units
            0x007f_ffff, // the largest f32 subnormal: up to the smallest normal
            0x7f7f_7fff, // below half a unit past the largest finite: stays
            0x7f7f_8000, // exactly half a unit past it: infinity (even)
            0x7f7f_ffff, // the largest f32: infinity
            0x7f80_0000, // infinity
            0x7f80_0001, // a signalling NaN
            0x7fc0_0000, // the quiet NaN
            0x7fff_ffff, // a NaN with every payload bit
        ],
    );
}

#[test]
fn f16_rounds_to_nearest_even() {
    check_all(
        F16_FORMAT,
        "f16",
        127 - 26, // below half the smallest subnormal (2^-24)
        127 + 16, // past the overflow threshold (65520)
        &[
            0x0000_0000, // zero
            0x3f80_1000, // 1 + 2^-11: a tie, down to the even 1
            0x3f80_3000, // 1 + 3 * 2^-11: a tie, up to 1 + 2^-9
            0x3300_0000, // 2^-25, half the smallest subnormal: a tie, down to 0
            0x3300_0001, // just above it: the smallest subnormal
            0x3340_0000, // 1.5 * 2^-24: a tie between 1 and 2 units, up to 2
            0x33a0_0000, // 2.5 * 2^-24: a tie, down to 2 units
            0x387f_e000, // 2^-14 - 2^-25: a tie between the largest subnormal and 2^-14
            0x3880_0000, // 2^-14, the smallest normal
            0x477f_e000, // 65504, the largest finite half
            0x477f_efff, // just below 65520: 65504
            0x477f_f000, // 65520: a tie, to the even pattern, which is infinity
            0x4780_0000, // 65536
            0x7f7f_ffff, // the largest f32
            0x7f80_0000, // infinity
            0x7f80_0001, // a signalling NaN
            0x7fc0_0000, // the quiet NaN
        ],
    );
}

/// Every finite pattern converts to f32 and back unchanged.
#[test]
fn every_half_pattern_round_trips() {
    for pattern in 0..=u16::MAX {
        let (h, b) = (distkit::F16(pattern), distkit::BF16(pattern));
        if !h.to_f32().is_nan() {
            assert_eq!(distkit::F16::from_f32(h.to_f32()), h, "f16 {pattern:#06x}");
            assert_eq!(F16_FORMAT.reference(h.to_f32()), pattern, "reference f16 {pattern:#06x}");
        }
        if !b.to_f32().is_nan() {
            assert_eq!(distkit::BF16::from_f32(b.to_f32()), b, "bf16 {pattern:#06x}");
            assert_eq!(BF16_FORMAT.reference(b.to_f32()), pattern, "reference bf16 {pattern:#06x}");
        }
    }
}
