#include "cc/comm/reduce_kernels.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "cc/core/half.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

using comm_internal::BFloat16ToFloat;
using comm_internal::Float16ToFloat;
using comm_internal::FloatToBFloat16;
using comm_internal::FloatToFloat16;

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

}  // namespace
}  // namespace distkit
