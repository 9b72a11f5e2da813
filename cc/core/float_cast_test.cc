#include "cc/core/float_cast.h"

#include <cstdint>
#include <vector>

#include "cc/core/half.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(FloatCastTest, RoundTripsThroughEveryFloatType) {
  const std::vector<float> values = {0.f, 1.f, -2.5f, 1.0f / 3, 65504.f, 1e-3f};
  for (DataType narrow : {DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<uint16_t> half(values.size());
    ASSERT_TRUE(CastFloats(values.data(), DataType::kFloat32, half.data(),
                           narrow, values.size())
                    .ok());
    std::vector<double> wide(values.size());
    ASSERT_TRUE(CastFloats(half.data(), narrow, wide.data(), DataType::kFloat64,
                           values.size())
                    .ok());
    for (size_t i = 0; i < values.size(); ++i) {
      const float want = narrow == DataType::kFloat16
                             ? Float16ToFloat(FloatToFloat16(values[i]))
                             : BFloat16ToFloat(FloatToBFloat16(values[i]));
      EXPECT_EQ(wide[i], want) << i;
    }
  }
  // 1/3 in float16 is 0.333251953125 (round to nearest even).
  uint16_t h = 0;
  const double third = 1.0 / 3;
  ASSERT_TRUE(
      CastFloats(&third, DataType::kFloat64, &h, DataType::kFloat16, 1).ok());
  EXPECT_EQ(Float16ToFloat(h), 0.333251953125f);
}

TEST(FloatCastTest, AddsInTheDestinationType) {
  std::vector<float> acc = {1.f, 2.f};
  std::vector<uint16_t> g = {FloatToBFloat16(0.5f), FloatToBFloat16(-4.f)};
  ASSERT_TRUE(AddFloats(g.data(), DataType::kBFloat16, acc.data(),
                        DataType::kFloat32, 2)
                  .ok());
  EXPECT_EQ(acc, (std::vector<float>{1.5f, -2.f}));
}

TEST(FloatCastTest, IntegersAreRefused) {
  int32_t i = 3;
  float f = 0;
  absl::Status s = CastFloats(&i, DataType::kInt32, &f, DataType::kFloat32, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "source is int32; only floating types convert");
}

}  // namespace
}  // namespace distkit
