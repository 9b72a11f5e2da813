#include "cc/comm/op_signature.h"

#include "gtest/gtest.h"

namespace distkit {
namespace {

OpSignature Sig(OpCode op, DataType dt, int64_t count, uint64_t seq = 3) {
  OpSignature s;
  s.op = static_cast<uint32_t>(op);
  s.dtype = static_cast<int32_t>(dt);
  s.count = count;
  s.seq = seq;
  s.reduce_op = static_cast<int32_t>(ReduceOp::kSum);
  return s;
}

TEST(OpSignatureTest, AgreementAndDisagreement) {
  OpContext ctx{3, OpCode::kAllReduce, "world"};
  std::vector<OpSignature> same(3,
                                Sig(OpCode::kAllReduce, DataType::kFloat32, 4));
  EXPECT_TRUE(CheckAgreement(ctx, same).ok());
  std::vector<OpSignature> sizes = same;
  sizes[1].count = 8;
  absl::Status s = CheckAgreement(ctx, sizes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      s.message().find("ranks disagree on all_reduce #3 on group 'world'"),
      absl::string_view::npos)
      << s;
  EXPECT_NE(
      s.message().find("rank(s) 0, 2 called all_reduce #3 float32 x4 op=sum"),
      absl::string_view::npos)
      << s;
  EXPECT_NE(
      s.message().find("rank(s) 1 called all_reduce #3 float32 x8 op=sum"),
      absl::string_view::npos)
      << s;
  std::vector<OpSignature> ops = same;
  ops[2] = Sig(OpCode::kBroadcast, DataType::kInt64, 4);
  ops[2].root = 1;
  ops[2].reduce_op = -1;
  s = CheckAgreement(ctx, ops);
  EXPECT_NE(s.message().find("rank(s) 2 called broadcast #3 int64 x4 root=1"),
            absl::string_view::npos)
      << s;
}

}  // namespace
}  // namespace distkit
