// SingleCopyPath's retraction (Leave) and a copier's view of it, in one
// process: the "peers" are rank headers of a segment in this process's own
// memory, set by the test (a copier stopped inside its copy is a header
// that keeps naming the owner in copying_with).

#include "cc/comm/shm/single_copy_path.h"

#include <stdlib.h>
#include <sys/mman.h>

#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cc/comm/op_context.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/comm/shm/shm_segment.h"
#include "cc/comm/shm/shm_steps.h"
#include "cc/comm/shm/single_copy_collectives.h"
#include "cc/core/data_type.h"
#include "cc/core/tensor_ref.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// A zeroed segment of `size` ranks in this process's memory.
class Segment {
 public:
  explicit Segment(int size)
      : bytes_(ShmLayout::SegmentBytesFor(size)),
        base_(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)),
        layout_(base_, size) {}
  ~Segment() { munmap(base_, bytes_); }
  const ShmLayout& layout() const { return layout_; }

 private:
  const size_t bytes_;
  void* const base_;
  const ShmLayout layout_;
};

OpContext Context(absl::Duration timeout) {
  OpContext ctx;
  ctx.seq = 1;
  ctx.op = OpCode::kAllReduce;
  ctx.group_name = "world";
  ctx.timeout = timeout;
  return ctx;
}

// Rank 0 leaves a failed operation while rank 1 is stopped inside a copy
// with its buffer.
TEST(SingleCopyPathTest, AbortEndsTheRetractionWaitPromptly) {
  Segment segment(2);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, /*single_copy_everywhere=*/true,
                      /*oversubscribed=*/false);
  segment.layout().header(1)->copying_with.store(1);  // names rank 0
  std::thread aborter([&steps] {
    absl::SleepFor(absl::Milliseconds(100));
    steps.Abort();
  });
  const absl::Time start = absl::Now();
  const absl::Status st =
      path.Leave(Context(absl::Seconds(30)), absl::UnavailableError("failed"));
  const absl::Duration took = absl::Now() - start;
  aborter.join();
  // The old wait ran to its bound (30 s here) whatever the abort.
  EXPECT_LT(took, absl::Seconds(5)) << st;
  // The copier was not seen to leave: the buffer is not free.
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rank 1")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "aborted")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "failed [UNAVAILABLE]")) << st;
  EXPECT_EQ(st.GetPayload(SingleCopyPath::kBufferStillInUsePayload),
            absl::Cord("1"));
  // Retracted: a copy that starts now fails.
  EXPECT_EQ(segment.layout().header(0)->buffer.load(), 0u);
}

TEST(SingleCopyPathTest, BoundRunOutIsDataLossNamingTheCopier) {
  Segment segment(3);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, true, false);
  segment.layout().header(2)->copying_with.store(1);
  const absl::Time start = absl::Now();
  // Clamped up to kRetractWaitMin.
  const absl::Status st = path.Leave(Context(absl::Seconds(1)),
                                     absl::DeadlineExceededError("timed out"));
  EXPECT_GE(absl::Now() - start, SingleCopyPath::kRetractWaitMin);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rank 2 was still copying"))
      << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "may still be read or written"))
      << st;
  EXPECT_EQ(st.GetPayload(SingleCopyPath::kBufferStillInUsePayload),
            absl::Cord("2"));
}

TEST(SingleCopyPathTest, NoCopierKeepsTheOperationsError) {
  Segment segment(2);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, true, false);
  steps.Abort();  // an abort with nobody copying changes nothing
  const absl::Status why = absl::CancelledError("aborted");
  EXPECT_EQ(path.Leave(Context(absl::Seconds(30)), why), why);
  EXPECT_TRUE(path.Leave(Context(absl::Seconds(30)), absl::OkStatus()).ok());
}

// Rank 1 folds its slice of an all_reduce while rank 0 (which passed every
// step) has retracted its buffer: the group's failure is rank 0's, whether
// rank 0 marked it already (its own copy failed) or not (it timed out or
// was aborted); a third rank waiting at a step is told so.
void CopierFindsRetracted(bool owner_marked) {
  Segment segment(3);
  const ShmLayout& layout = segment.layout();
  for (int r : {0, 2}) {
    ShmRankHeader* h = layout.header(r);
    h->step.store(100);
    h->turns[0].step.store(100);
    h->turns[1].step.store(100);
  }
  layout.header(0)->buffer.store(0);  // retracted
  if (owner_marked) layout.group()->failed_by.store(1);
  ShmSteps steps(layout, /*rank=*/1);
  SingleCopyPath path(&steps, true, false);
  std::vector<float> data(1 << 16, 1.0f);
  absl::StatusOr<ReduceFn> fn = GetReduceFn(DataType::kFloat32, ReduceOp::kSum);
  ASSERT_TRUE(fn.ok());
  const OpContext ctx = Context(absl::Seconds(5));
  const absl::Status st = AllReduceBySingleCopy(
      path, ctx, TensorRef(data.data(), data.size(), DataType::kFloat32), *fn);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "retracted its buffer")) << st;
  // Not 2 (rank 1, the copier).
  EXPECT_EQ(layout.group()->failed_by.load(), 1);

  // Rank 2 waits for rank 1's next step, which will not come.
  layout.header(2)->step.store(0);
  layout.header(2)->turns[0].step.store(0);
  layout.header(2)->turns[1].step.store(0);
  ShmSteps third(layout, /*rank=*/2);
  ASSERT_TRUE(third.Step(ctx).ok());  // rank 1 published step 1
  const absl::Status waited = third.Step(ctx);
  EXPECT_TRUE(
      absl::StrContains(waited.message(), "rank 0 failed inside the operation"))
      << waited;
}

TEST(SingleCopyPathTest, CopierNamesTheOwnerThatRetracted) {
  CopierFindsRetracted(/*owner_marked=*/false);
}

TEST(SingleCopyPathTest, CopierKeepsTheOwnersMark) {
  CopierFindsRetracted(/*owner_marked=*/true);
}

TEST(SingleCopyPathTest, FirstFailureIsKept) {
  Segment segment(3);
  ShmSteps one(segment.layout(), 1), two(segment.layout(), 2);
  EXPECT_EQ(one.FailGroup(absl::InternalError("first")).message(), "first");
  EXPECT_FALSE(two.FailGroup(absl::InternalError("second")).ok());
  EXPECT_EQ(segment.layout().group()->failed_by.load(), 2);  // 1 + rank 1
}

// The product library reads no hook from the environment (the hook is in a
// test-only library this test does not link), so a malformed value cannot
// end the process, and a well-formed one injects nothing.
TEST(SingleCopyPathTest, ProductIgnoresTheTestHookVariable) {
  for (const char* value : {"garbage", "read:x:fail_after:/nonexistent",
                            "read:1:fail_after:/nonexistent"}) {
    setenv("DISTKIT_SHM_TEST_COPY_HOOK", value, 1);
    EXPECT_EQ(SingleCopyTestHook::Make(), nullptr) << value;
    Segment segment(2);
    ShmSteps steps(segment.layout(), 0);
    SingleCopyPath path(&steps, true, false);  // the old code aborted here
  }
  unsetenv("DISTKIT_SHM_TEST_COPY_HOOK");
}

}  // namespace
}  // namespace distkit
