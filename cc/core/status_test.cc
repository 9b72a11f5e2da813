#include "cc/core/status.h"

#include "gtest/gtest.h"

namespace distkit {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  DK_ASSIGN_OR_RETURN(int h, Half(x));
  DK_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckEven(int x) {
  DK_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusTest, MacrosPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_EQ(CheckEven(3).message(), "odd");
}

TEST(StatusTest, AnnotatePrefixesAndKeepsCode) {
  absl::Status s = Annotate(absl::UnavailableError("peer gone"), "all_reduce");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "all_reduce: peer gone");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "x").ok());
}

TEST(StatusTest, CodeNumberingIsGoogleRpc) {
  // The C ABI passes these numbers through unchanged.
  EXPECT_EQ(static_cast<int>(absl::StatusCode::kInvalidArgument), 3);
  EXPECT_EQ(static_cast<int>(absl::StatusCode::kDeadlineExceeded), 4);
  EXPECT_EQ(static_cast<int>(absl::StatusCode::kFailedPrecondition), 9);
  EXPECT_EQ(static_cast<int>(absl::StatusCode::kUnavailable), 14);
  EXPECT_EQ(static_cast<int>(absl::StatusCode::kUnauthenticated), 16);
  EXPECT_EQ(StatusCodeName(absl::StatusCode::kDeadlineExceeded),
            "DEADLINE_EXCEEDED");
}

}  // namespace
}  // namespace distkit
