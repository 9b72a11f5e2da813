#include "cc/comm/reduce_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/comm/reduce_kernels_isa.h"
#include "cc/core/half.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(HalfTest, Float16KnownValues) {
  EXPECT_EQ(FloatToFloat16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFloat16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToFloat16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFloat16(1e6f), 0x7c00);                // overflow -> inf
  EXPECT_EQ(FloatToFloat16(5.9604645e-08f), 0x0001);      // smallest subnormal
  EXPECT_EQ(FloatToFloat16(1.0f + 1.0f / 2048), 0x3c00);  // tie -> even
  EXPECT_EQ(FloatToFloat16(1.0f + 3.0f / 2048), 0x3c02);  // tie -> even (up)
  EXPECT_FLOAT_EQ(Float16ToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(Float16ToFloat(FloatToFloat16(NAN))));
  // Every finite half round-trips exactly.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    ASSERT_EQ(FloatToFloat16(Float16ToFloat(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(HalfTest, BFloat16KnownValues) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-3.0f), 0xc040);
  EXPECT_FLOAT_EQ(BFloat16ToFloat(0x4049), 3.140625f);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7f80) == 0x7f80) continue;
    ASSERT_EQ(FloatToBFloat16(BFloat16ToFloat(static_cast<uint16_t>(h))), h)
        << h;
  }
}

template <typename T>
std::vector<T> Apply(DataType dt, ReduceOp op, std::vector<T> a,
                     const std::vector<T>& b) {
  ReduceFn fn = *GetReduceFn(dt, op);
  fn(a.data(), a.data(), b.data(), a.size());
  return a;
}

TEST(ReduceKernelsTest, Integers) {
  std::vector<int32_t> a = {1, -7, 12, 0x0f0f}, b = {5, 3, -12, 0x00ff};
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kSum, a, b),
            (std::vector<int32_t>{6, -4, 0, 0x0f0f + 0x00ff}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kProduct, a, b),
            (std::vector<int32_t>{5, -21, -144, 0x0f0f * 0x00ff}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kMin, a, b),
            (std::vector<int32_t>{1, -7, -12, 0x00ff}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kMax, a, b),
            (std::vector<int32_t>{5, 3, 12, 0x0f0f}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kBand, a, b),
            (std::vector<int32_t>{1 & 5, -7 & 3, 12 & -12, 0x000f}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kBor, a, b),
            (std::vector<int32_t>{1 | 5, -7 | 3, 12 | -12, 0x0fff}));
  EXPECT_EQ(Apply(DataType::kInt32, ReduceOp::kBxor, a, b),
            (std::vector<int32_t>{1 ^ 5, -7 ^ 3, 12 ^ -12, 0x0ff0}));
  std::vector<int64_t> big = {INT64_MAX}, one = {1};
  EXPECT_EQ(Apply(DataType::kInt64, ReduceOp::kSum, big, one)[0],
            INT64_MIN);  // wraps
  std::vector<uint8_t> u = {250, 3}, v = {10, 200};
  EXPECT_EQ(Apply(DataType::kUInt8, ReduceOp::kSum, u, v),
            (std::vector<uint8_t>{4, 203}));
  std::vector<int8_t> i8 = {-128, 100}, j8 = {-1, 27};
  EXPECT_EQ(Apply(DataType::kInt8, ReduceOp::kMax, i8, j8),
            (std::vector<int8_t>{-1, 100}));
}

TEST(ReduceKernelsTest, Floats) {
  std::vector<float> a = {1.5f, -2.0f}, b = {0.25f, 8.0f};
  EXPECT_EQ(Apply(DataType::kFloat32, ReduceOp::kSum, a, b),
            (std::vector<float>{1.75f, 6.0f}));
  EXPECT_EQ(Apply(DataType::kFloat32, ReduceOp::kProduct, a, b),
            (std::vector<float>{0.375f, -16.0f}));
  std::vector<double> c = {1e300, -3}, d = {1e300, 4};
  EXPECT_EQ(Apply(DataType::kFloat64, ReduceOp::kMax, c, d),
            (std::vector<double>{1e300, 4}));
  std::vector<uint16_t> h = {FloatToFloat16(1.5f), FloatToFloat16(-2.0f)};
  std::vector<uint16_t> k = {FloatToFloat16(0.25f), FloatToFloat16(8.0f)};
  std::vector<uint16_t> hs = Apply(DataType::kFloat16, ReduceOp::kSum, h, k);
  EXPECT_EQ(Float16ToFloat(hs[0]), 1.75f);
  EXPECT_EQ(Float16ToFloat(hs[1]), 6.0f);
  std::vector<uint16_t> bh = {FloatToBFloat16(3.0f)},
                        bk = {FloatToBFloat16(-5.0f)};
  EXPECT_EQ(
      BFloat16ToFloat(Apply(DataType::kBFloat16, ReduceOp::kMin, bh, bk)[0]),
      -5.0f);
  EXPECT_EQ(BFloat16ToFloat(
                Apply(DataType::kBFloat16, ReduceOp::kProduct, bh, bk)[0]),
            -15.0f);
}

TEST(ReduceKernelsTest, Bools) {
  std::vector<uint8_t> a = {0, 0, 1, 1}, b = {0, 1, 0, 1};
  EXPECT_EQ(Apply(DataType::kBool, ReduceOp::kSum, a, b),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(Apply(DataType::kBool, ReduceOp::kMax, a, b),
            (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(Apply(DataType::kBool, ReduceOp::kProduct, a, b),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(Apply(DataType::kBool, ReduceOp::kMin, a, b),
            (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(Apply(DataType::kBool, ReduceOp::kBxor, a, b),
            (std::vector<uint8_t>{0, 1, 1, 0}));
}

TEST(ReduceKernelsTest, BitwiseOnFloatsIsRejected) {
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16,
                      DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op : {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
      absl::Status s = GetReduceFn(dt, op).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find(DataTypeName(dt)), absl::string_view::npos)
          << s;
    }
  }
  for (DataType dt : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      const bool bitwise = op == ReduceOp::kBand || op == ReduceOp::kBor ||
                           op == ReduceOp::kBxor;
      EXPECT_EQ(GetReduceFn(dt, op).ok(), !(bitwise && IsFloatingPoint(dt)));
    }
  }
}

TEST(ReduceKernelsTest, MeanDivisionTruncatesIntegers) {
  std::vector<int64_t> sums = {4, 6, 5, -5};
  DivideBySize(sums.data(), DataType::kInt64, sums.size(), 2);
  EXPECT_EQ(sums, (std::vector<int64_t>{2, 3, 2, -2}));  // toward zero
  std::vector<float> f = {5.0f, -1.0f};
  DivideBySize(f.data(), DataType::kFloat32, f.size(), 2);
  EXPECT_EQ(f, (std::vector<float>{2.5f, -0.5f}));
  std::vector<uint16_t> h = {FloatToBFloat16(3.0f)};
  DivideBySize(h.data(), DataType::kBFloat16, 1, 4);
  EXPECT_EQ(BFloat16ToFloat(h[0]), 0.75f);
  std::vector<uint8_t> b = {0, 1};
  DivideBySize(b.data(), DataType::kBool, 2, 3);
  EXPECT_EQ(b, (std::vector<uint8_t>{0, 1}));
}

// Whether element i of two outputs is the same value: the same bytes, or
// both NaN (IEEE 754 leaves a NaN result's sign and payload open, and a
// compiler may swap the operands of a commutative operation).
bool SameElement(DataType dt, const unsigned char* x, const unsigned char* y,
                 size_t i) {
  const size_t e = ElementSize(dt);
  if (std::memcmp(x + i * e, y + i * e, e) == 0) return true;
  auto is_nan = [dt, e, i](const unsigned char* p) {
    switch (dt) {
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        uint16_t h;
        std::memcpy(&h, p + i * e, e);
        return std::isnan(dt == DataType::kFloat16 ? Float16ToFloat(h)
                                                   : BFloat16ToFloat(h));
      }
      case DataType::kFloat32: {
        float f;
        std::memcpy(&f, p + i * e, e);
        return std::isnan(f);
      }
      case DataType::kFloat64: {
        double d;
        std::memcpy(&d, p + i * e, e);
        return std::isnan(d);
      }
      default:
        return false;
    }
  };
  return is_nan(x) && is_nan(y);
}

// Every instruction-set variant this CPU runs gives the baseline's values,
// for every dtype and op, in place and not, and divides (mean) alike: ranks
// on different CPUs must reduce alike. The inputs are random bit patterns, so
// floats include NaNs, infinities, signed zeros and subnormals; the lengths
// leave vector tails.
TEST(ReduceKernelsTest, EveryInstructionSetVariantMatchesTheBaseline) {
  const std::vector<comm_internal::ReduceKernelVariant> variants =
      comm_internal::ReduceKernelVariants();
  ASSERT_FALSE(variants.empty());
  EXPECT_STREQ(variants[0].name, "baseline");
  if (variants.size() == 1) {
    GTEST_SKIP() << "SKIPPED: this CPU runs only the baseline variant";
  }
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  auto random_bytes = [&seed](size_t n) {
    std::vector<unsigned char> v(n);
    for (unsigned char& c : v) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      c = static_cast<unsigned char>(seed >> 56);
    }
    return v;
  };
  for (size_t i = 1; i < variants.size(); ++i) {
    for (DataType dt : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        if (!CheckReduceOpSupported(op, dt).ok()) continue;
        const ReduceFn base = comm_internal::SelectBaselineReduceLoop(dt, op);
        const ReduceFn wide = variants[i].select(dt, op);
        ASSERT_NE(base, nullptr);
        ASSERT_NE(wide, nullptr);
        for (size_t n : {1, 7, 64, 1000, 4099}) {
          const size_t bytes = n * ElementSize(dt);
          const std::vector<unsigned char> a = random_bytes(bytes);
          const std::vector<unsigned char> b = random_bytes(bytes);
          // 0: separate output; 1: into a; 2: into b.
          for (int into = 0; into < 3; ++into) {
            std::vector<unsigned char> x = a, y = b, out_base(bytes);
            std::vector<unsigned char> x2 = a, y2 = b, out_wide(bytes);
            unsigned char* o1 = into == 1   ? x.data()
                                : into == 2 ? y.data()
                                            : out_base.data();
            unsigned char* o2 = into == 1   ? x2.data()
                                : into == 2 ? y2.data()
                                            : out_wide.data();
            base(o1, x.data(), y.data(), n);
            wide(o2, x2.data(), y2.data(), n);
            size_t differ = 0;
            for (size_t k = 0; k < n; ++k) {
              differ += !SameElement(dt, o1, o2, k);
            }
            EXPECT_EQ(differ, 0u)
                << variants[i].name << " " << DataTypeName(dt) << " "
                << ReduceOpName(op) << " n=" << n << " into=" << into;
          }
          if (op == ReduceOp::kMean) {  // the division that follows the sum
            std::vector<unsigned char> x = a, x2 = a;
            variants[0].divide(x.data(), dt, n, 3);
            variants[i].divide(x2.data(), dt, n, 3);
            size_t differ = 0;
            for (size_t k = 0; k < n; ++k) {
              differ += !SameElement(dt, x.data(), x2.data(), k);
            }
            EXPECT_EQ(differ, 0u) << variants[i].name << " divide "
                                  << DataTypeName(dt) << " n=" << n;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace distkit
