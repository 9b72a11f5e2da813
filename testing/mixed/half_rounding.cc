// The C++ side of half_rounding_test (see README.md, "16-bit floats"): the
// library's own conversion (CastFloats, what mixed precision and the
// compressed gradients use) on the shared inputs.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cc/core/data_type.h"
#include "cc/core/float_cast.h"

namespace {

constexpr int kCount = 100000;

// The inputs every language generates alike: xorshift32 draws shaped into
// random floats, bfloat16 and float16 ties, float16-range values and
// specials (zeros, infinities, NaNs, subnormals, the largest floats).
std::vector<uint32_t> Inputs() {
  static const uint32_t kSpecials[12] = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xff800001,
      0x00000001, 0x807fffff, 0x7f7fffff, 0x7f7f8000, 0x477ff000, 0x33000000};
  uint32_t state = 0x2545f491;
  std::vector<uint32_t> out(kCount);
  for (int i = 0; i < kCount; ++i) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    const uint32_t x = state;
    uint32_t bits = x;
    switch (i % 8) {
      case 4:  // a bfloat16 tie
        bits = (x & 0xffff0000u) | 0x8000u;
        break;
      case 5:  // float16's range, 2^-25 to 2^16
      case 6:  // ... at a float16 tie
        bits = (x & 0x807fffffu) | ((102 + (x >> 24) % 42) << 23);
        if (i % 8 == 6) bits = (bits & ~0x1fffu) | 0x1000u;
        break;
      case 7:
        bits = kSpecials[(x >> 8) % 12];
        break;
    }
    out[i] = bits;
  }
  return out;
}

// value -> dtype -> float32, NaN written as 0x7fc00000 (payloads are not
// part of the rule: torch writes bfloat16 NaN as 0xffff).
std::vector<uint32_t> RoundTrip(const std::vector<uint32_t>& in,
                                distkit::DataType dtype) {
  std::vector<uint16_t> half(in.size());
  std::vector<uint32_t> back(in.size());
  if (!distkit::CastFloats(in.data(), distkit::DataType::kFloat32, half.data(),
                           dtype, in.size())
           .ok() ||
      !distkit::CastFloats(half.data(), dtype, back.data(),
                           distkit::DataType::kFloat32, in.size())
           .ok()) {
    std::fprintf(stderr, "CastFloats failed\n");
    std::exit(1);
  }
  for (uint32_t& b : back) {
    if ((b & 0x7fffffffu) > 0x7f800000u) b = 0x7fc00000u;
  }
  return back;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT\n", argv[0]);
    return 2;
  }
  const std::vector<uint32_t> in = Inputs();
  const std::vector<uint32_t> bf16 =
      RoundTrip(in, distkit::DataType::kBFloat16);
  const std::vector<uint32_t> f16 = RoundTrip(in, distkit::DataType::kFloat16);
  std::FILE* f = std::fopen(argv[1], "wb");
  if (f == nullptr) return 1;
  for (int i = 0; i < kCount; ++i) {  // little-endian u32 pairs
    const uint32_t pair[2] = {bf16[i], f16[i]};
    std::fwrite(pair, sizeof(pair), 1, f);
  }
  return std::fclose(f) == 0 ? 0 : 1;
}
