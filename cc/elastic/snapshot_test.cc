// Snapshot in one process: registration checks, commit numbers, a commit
// that replaces the held snapshot only when complete, Restore; BufferLayout's
// encoding and the differences it names.

#include "cc/elastic/snapshot.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cc/elastic/buffer_layout.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distkit {
namespace elastic {
namespace {

using ::testing::HasSubstr;

TEST(SnapshotTest, CommitAndRestoreEveryBuffer) {
  std::vector<double> w = {1, 2, 3};
  int64_t step = 7;
  Snapshot s;
  ASSERT_TRUE(s.Register("w", w.data(), 3 * sizeof(double)).ok());
  ASSERT_TRUE(s.Register("step", &step, sizeof(step)).ok());
  EXPECT_EQ(s.commit_number(), 0);
  EXPECT_EQ(s.bytes(), 0);
  EXPECT_EQ(s.registered_bytes(), 32);
  EXPECT_EQ(s.Restore().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.Commit().ok());
  EXPECT_EQ(s.commit_number(), 1);
  EXPECT_EQ(s.bytes(), 32);
  w = {9, 9, 9};
  step = 99;
  ASSERT_TRUE(s.Restore().ok());
  EXPECT_EQ(w, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(step, 7);
  w[1] = 5;
  step = 8;
  ASSERT_TRUE(s.Commit().ok());
  EXPECT_EQ(s.commit_number(), 2);
  w = {0, 0, 0};
  step = 0;
  ASSERT_TRUE(s.Restore().ok());
  EXPECT_EQ(w, (std::vector<double>{1, 5, 3}));
  EXPECT_EQ(step, 8);
}

TEST(SnapshotTest, RegistrationIsChecked) {
  double x = 0;
  Snapshot s;
  EXPECT_THAT(std::string(s.Register("", &x, 8).message()),
              HasSubstr("needs a name"));
  EXPECT_THAT(std::string(s.Register("x", nullptr, 8).message()),
              HasSubstr("'x' of 8 bytes has no memory"));
  EXPECT_THAT(std::string(s.Register("x", &x, -1).message()),
              HasSubstr("negative"));
  EXPECT_EQ(s.Register("x", &x, int64_t{1} << 48).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.Register(std::string(2000, 'n'), &x, 8).message()),
              HasSubstr("at most 1024"));
  ASSERT_TRUE(s.Register("x", &x, 8).ok());
  EXPECT_THAT(std::string(s.Register("x", &x, 8).message()),
              HasSubstr("'x' is already registered"));
  EXPECT_TRUE(s.Register("empty", nullptr, 0).ok());
  ASSERT_TRUE(s.Commit().ok());
  absl::Status late = s.Register("y", &x, 8);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(late.message()), HasSubstr("'y'"));
}

TEST(BufferLayoutTest, EncodesAndDecodes) {
  BufferLayout a;
  ASSERT_TRUE(a.Add("params", 800).ok());
  ASSERT_TRUE(a.Add("momentum", 800).ok());
  ASSERT_TRUE(a.Add("step", 8).ok());
  absl::StatusOr<BufferLayout> b = BufferLayout::Decode(a.Encode());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(BufferLayout::CheckSame(a, 0, *b, 1).ok());
  EXPECT_EQ(b->total_bytes(), 1608);
  EXPECT_EQ(b->buffers()[2].offset, 1600);
  EXPECT_FALSE(BufferLayout::Decode("abc").ok());
  std::string truncated = a.Encode();
  truncated.pop_back();
  EXPECT_FALSE(BufferLayout::Decode(truncated).ok());
}

TEST(BufferLayoutTest, DifferencesNameTheBufferAndTheRanks) {
  BufferLayout a, size, name, fewer;
  ASSERT_TRUE(a.Add("params", 800).ok());
  ASSERT_TRUE(a.Add("step", 8).ok());
  ASSERT_TRUE(size.Add("params", 792).ok());
  ASSERT_TRUE(size.Add("step", 8).ok());
  ASSERT_TRUE(name.Add("params", 800).ok());
  ASSERT_TRUE(name.Add("epoch", 8).ok());
  ASSERT_TRUE(fewer.Add("params", 800).ok());
  absl::Status s = BufferLayout::CheckSame(a, 0, size, 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("buffer 'params' is 800 bytes on rank 0 but 792 "
                        "bytes on rank 2"));
  EXPECT_THAT(std::string(BufferLayout::CheckSame(a, 0, name, 3).message()),
              HasSubstr("buffer 1 is 'step' on rank 0 but 'epoch' on rank 3"));
  EXPECT_THAT(std::string(BufferLayout::CheckSame(a, 0, fewer, 1).message()),
              HasSubstr("buffer 'step' is registered on rank 0 but not on "
                        "rank 1"));
  EXPECT_THAT(std::string(BufferLayout::CheckSame(fewer, 0, a, 1).message()),
              HasSubstr("buffer 'step' is registered on rank 1 but not on "
                        "rank 0"));
}

}  // namespace
}  // namespace elastic
}  // namespace distkit
