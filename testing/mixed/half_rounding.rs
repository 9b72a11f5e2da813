//! The Rust side of half_rounding_test (see README.md, "16-bit floats"): the
//! crate's `BF16` and `F16` on the inputs every language generates alike.
use std::io::Write;

use distkit::{BF16, F16};

const COUNT: usize = 100_000;
const SPECIALS: [u32; 12] = [
    0x0000_0000, 0x8000_0000, 0x7f80_0000, 0xff80_0000, 0x7fc0_0000, 0xff80_0001,
    0x0000_0001, 0x807f_ffff, 0x7f7f_ffff, 0x7f7f_8000, 0x477f_f000, 0x3300_0000,
];

/// xorshift32 draws shaped as half_rounding.cc's Inputs().
fn inputs() -> Vec<u32> {
    let mut state: u32 = 0x2545_f491;
    (0..COUNT)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let x = state;
            match i % 8 {
                4 => (x & 0xffff_0000) | 0x8000,
                k @ (5 | 6) => {
                    let bits = (x & 0x807f_ffff) | ((102 + (x >> 24) % 42) << 23);
                    if k == 6 { (bits & !0x1fff) | 0x1000 } else { bits }
                }
                7 => SPECIALS[((x >> 8) % 12) as usize],
                _ => x,
            }
        })
        .collect()
}

/// NaN written as 0x7fc00000: payloads are not part of the rule.
fn canonical(x: f32) -> u32 {
    if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() }
}

fn main() {
    let path = std::env::args().nth(1).expect("usage: half_rounding OUTPUT");
    let mut bytes = Vec::with_capacity(COUNT * 8);
    for bits in inputs() {
        let x = f32::from_bits(bits);
        bytes.extend_from_slice(&canonical(BF16::from_f32(x).to_f32()).to_le_bytes());
        bytes.extend_from_slice(&canonical(F16::from_f32(x).to_f32()).to_le_bytes());
    }
    std::fs::File::create(&path).and_then(|mut f| f.write_all(&bytes)).expect("write the output");
}
