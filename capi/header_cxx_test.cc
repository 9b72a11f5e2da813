// The public header compiles as C++ too, and its constants match the core's
// enums (the ABI passes them through by value).
#include "absl/status/status.h"
#include "cc/comm/work.h"
#include "cc/core/data_type.h"
#include "cc/core/reduce_op.h"
#include "distkit/distkit.h"
#include "gtest/gtest.h"

namespace {

TEST(HeaderTest, ConstantsMatchTheCore) {
  EXPECT_EQ(DK_INVALID_ARGUMENT,
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(DK_DEADLINE_EXCEEDED,
            static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(DK_FAILED_PRECONDITION,
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(DK_UNAVAILABLE, static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(DK_UNAUTHENTICATED,
            static_cast<int>(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(DK_BFLOAT16, static_cast<int>(distkit::DataType::kBFloat16));
  EXPECT_EQ(DK_BOOL, static_cast<int>(distkit::DataType::kBool));
  EXPECT_EQ(DK_OP_BXOR, static_cast<int>(distkit::ReduceOp::kBxor));
  EXPECT_EQ(DK_OP_MEAN, static_cast<int>(distkit::ReduceOp::kMean));
  EXPECT_EQ(DK_WORK_FAILED, static_cast<int>(distkit::WorkState::kFailed));
}

TEST(HeaderTest, ConfigDefaults) {
  dk_store_config_t s;
  dk_store_config_init(&s);
  EXPECT_EQ(s.struct_size, sizeof(s));
  EXPECT_EQ(s.timeout_ms, 300000);
  dk_init_config_t c;
  dk_init_config_init(&c);
  EXPECT_STREQ(c.backend, "gloo");
  EXPECT_EQ(c.timeout_ms, 1800000);
}

TEST(HeaderTest, ErrorsWithoutInit) {
  dk_error_t* err = nullptr;
  EXPECT_EQ(dk_group_barrier(nullptr, nullptr, &err), DK_FAILED_PRECONDITION);
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(dk_error_code(err), DK_FAILED_PRECONDITION);
  // An error object already present is left alone, not overwritten.
  dk_error_t* kept = err;
  EXPECT_EQ(dk_group_barrier(nullptr, nullptr, &err), DK_FAILED_PRECONDITION);
  EXPECT_EQ(err, kept);
  dk_error_free(err);
  dk_store_config_t bad;
  dk_store_config_init(&bad);
  dk_store_t* store = nullptr;
  err = nullptr;
  EXPECT_EQ(dk_store_connect(&bad, &store, &err), DK_INVALID_ARGUMENT);
  EXPECT_STREQ(dk_error_message(err), "config: address is NULL");
  dk_error_free(err);
}

}  // namespace
