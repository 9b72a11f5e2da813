#!/usr/bin/env bash
# bfloat16 and float16 round trips (float32 -> 16 bits -> float32) equal in
# C++, Python, Rust and Go for the same 10^5 inputs (README.md, "16-bit
# floats"): each program writes (bf16 trip, f16 trip) per input as
# little-endian u32 pairs; every file must equal the C++ one byte for byte.
# Usage: half_rounding_test.sh CC_PROGRAM PY_PROGRAM RUST_PROGRAM GO_PROGRAM
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}"
names=(c++ python rust go)
programs=("$@")
for k in "${!names[@]}"; do
  "${programs[$k]}" "$out/${names[$k]}.bin"
done
status=0
for name in python rust go; do
  if ! cmp -s "$out/c++.bin" "$out/$name.bin"; then
    echo "FAIL: $name's round trips differ from C++'s (first differing bytes, offset/8 = input index):"
    cmp -l "$out/c++.bin" "$out/$name.bin" | head -5 || true
    status=1
  fi
done
[ "$status" = 0 ] && echo "ok: C++, Python, Rust and Go agree on $(($(stat -c %s "$out/c++.bin") / 8)) bf16 and f16 round trips"
exit "$status"
