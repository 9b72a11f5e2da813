#include "cc/core/data_type.h"

#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(DataTypeTest, SizesAndNames) {
  EXPECT_EQ(ElementSize(DataType::kFloat16), 2u);
  EXPECT_EQ(ElementSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(ElementSize(DataType::kFloat32), 4u);
  EXPECT_EQ(ElementSize(DataType::kFloat64), 8u);
  EXPECT_EQ(ElementSize(DataType::kInt8), 1u);
  EXPECT_EQ(ElementSize(DataType::kUInt8), 1u);
  EXPECT_EQ(ElementSize(DataType::kInt32), 4u);
  EXPECT_EQ(ElementSize(DataType::kInt64), 8u);
  EXPECT_EQ(ElementSize(DataType::kBool), 1u);
  for (DataType dt : kAllDataTypes) {
    EXPECT_EQ(*ParseDataType(DataTypeName(dt)), dt) << DataTypeName(dt);
    EXPECT_EQ(*DataTypeFromInt(static_cast<int32_t>(dt)), dt);
  }
  EXPECT_EQ(*ParseDataType("half"), DataType::kFloat16);
  EXPECT_EQ(*ParseDataType("Long"), DataType::kInt64);
  EXPECT_EQ(ParseDataType("complex64").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataTypeFromInt(9).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DataTypeFromInt(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DataTypeTest, DLPackRoundTrip) {
  for (DataType dt : kAllDataTypes) {
    DLDataType dl = ToDLPack(dt);
    EXPECT_EQ(dl.lanes, 1);
    absl::StatusOr<DataType> back = DataTypeFromDLPack(dl);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, dt) << DataTypeName(dt);
  }
  EXPECT_EQ(ToDLPack(DataType::kFloat32).code, kDLFloat);
  EXPECT_EQ(ToDLPack(DataType::kFloat32).bits, 32);
  EXPECT_EQ(ToDLPack(DataType::kBFloat16).code, kDLBfloat);
  EXPECT_EQ(ToDLPack(DataType::kInt64).code, kDLInt);
}

TEST(DataTypeTest, DLPackRejectsUnsupported) {
  DLDataType vec{kDLFloat, 32, 4};
  EXPECT_EQ(DataTypeFromDLPack(vec).status().code(),
            absl::StatusCode::kInvalidArgument);
  DLDataType i16{kDLInt, 16, 1};
  absl::Status s = DataTypeFromDLPack(i16).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bits=16"), absl::string_view::npos) << s;
}

TEST(DataTypeTest, Categories) {
  EXPECT_TRUE(IsFloatingPoint(DataType::kBFloat16));
  EXPECT_FALSE(IsFloatingPoint(DataType::kInt8));
  EXPECT_TRUE(IsIntegral(DataType::kUInt8));
  EXPECT_FALSE(IsIntegral(DataType::kBool));
  EXPECT_FALSE(IsIntegral(DataType::kFloat64));
}

}  // namespace
}  // namespace distkit
