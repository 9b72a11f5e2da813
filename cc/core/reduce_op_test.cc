#include "cc/core/reduce_op.h"

#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(ReduceOpTest, LookupIsCaseInsensitive) {
  EXPECT_EQ(*ParseReduceOp("sum"), ReduceOp::kSum);
  EXPECT_EQ(*ParseReduceOp("SUM"), ReduceOp::kSum);
  EXPECT_EQ(*ParseReduceOp("Mean"), ReduceOp::kMean);
  EXPECT_EQ(*ParseReduceOp("bXoR"), ReduceOp::kBxor);
  for (ReduceOp op : kAllReduceOps) {
    EXPECT_EQ(*ParseReduceOp(ReduceOpName(op)), op);
    EXPECT_EQ(*ReduceOpFromInt(static_cast<int32_t>(op)), op);
  }
}

TEST(ReduceOpTest, UnknownNameHasMmengineMessage) {
  absl::Status s = ParseReduceOp("avg").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "reduce op should be one of dict_keys(['sum', 'product', 'min', "
            "'max', 'band', 'bor', 'bxor']), bug got avg");
  EXPECT_FALSE(ReduceOpFromInt(8).ok());
}

TEST(ReduceOpTest, BitwiseNeedsIntegers) {
  absl::Status s = CheckReduceOpSupported(ReduceOp::kBand, DataType::kFloat32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("band"), absl::string_view::npos);
  EXPECT_NE(s.message().find("float32"), absl::string_view::npos);
  EXPECT_TRUE(CheckReduceOpSupported(ReduceOp::kBxor, DataType::kInt64).ok());
  EXPECT_TRUE(CheckReduceOpSupported(ReduceOp::kBor, DataType::kBool).ok());
  EXPECT_TRUE(CheckReduceOpSupported(ReduceOp::kMean, DataType::kInt32).ok());
}

}  // namespace
}  // namespace distkit
