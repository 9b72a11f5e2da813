// SingleCopyPath's retraction (Leave) and a copier's view of it, in one
// process: the "peers" are rank headers of a segment in this process's own
// memory, set by the test (a copier stopped inside its copy is a header
// that keeps naming the owner in copying_with).

#include "cc/comm/shm/single_copy_path.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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
#include "cc/comm/shm/peer_liveness.h"
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

// Read once per process (peer_liveness.cc), before any test looks: a
// copier whose heartbeat stands still is "gone" after 0.2 s of watching.
// The copiers that must not be (running ones) have no heartbeat to watch.
[[maybe_unused]] const bool kShortHeartbeatTimeout =
    setenv("DISTKIT_HEARTBEAT_TIMEOUT", "0.2", 1) == 0;

// Rank 1's header names rank 0 in copying_with (a copy in flight) and says
// that rank 1 is process `pid` (this process's namespace, no heartbeat).
void CopierIs(const ShmLayout& layout, int pid) {
  LivenessRecord& l = layout.header(1)->liveness;
  l.pid_namespace.store(ThisPidNamespace());
  l.pid.store(pid);
  l.heartbeat.store(kNoHeartbeat);
  layout.header(1)->copying_with.store(1);  // names rank 0
}

// A child process that sleeps until killed.
pid_t SleepingChild() {
  const pid_t child = fork();
  if (child == 0) {
    while (true) pause();
  }
  return child;
}

// Rank 0 leaves a failed operation after an abort while rank 1, stopped
// (SIGSTOP), is inside a copy with its buffer: the wait ends at once, and
// the error keeps its code and says that the buffer is not free.
TEST(SingleCopyPathTest, AbortEndsTheWaitForAStoppedCopier) {
  Segment segment(2);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, /*single_copy_everywhere=*/true,
                      /*oversubscribed=*/false);
  const pid_t child = SleepingChild();
  ASSERT_GT(child, 0);
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  CopierIs(segment.layout(), child);
  EXPECT_TRUE(PeerStopped(segment.layout().header(1)->liveness));
  steps.Abort();
  const absl::Time start = absl::Now();
  const absl::Status st =
      path.Leave(Context(absl::Seconds(30)), absl::UnavailableError("failed"));
  const absl::Duration took = absl::Now() - start;
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // Not the bound (30 s).
  EXPECT_LT(took, absl::Seconds(20)) << st;
  // The operation's code, not another: callers classify by it.
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(absl::StartsWith(st.message(), "failed; ")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rank 1 was still copying"))
      << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "aborted")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "keep it allocated")) << st;
  EXPECT_EQ(st.GetPayload(SingleCopyPath::kBufferStillInUsePayload),
            absl::Cord("1"));
  // Retracted: a copy that starts now fails.
  EXPECT_EQ(segment.layout().header(0)->buffer.load(), kRetractedBuffer);
}

// After an abort, a copier that is alive and not stopped (here: this very
// process, whose "copy" a thread ends later) may be inside its copy, only
// descheduled: it is waited for, so the buffer is free on return. The old
// code gave up 20 ms after the abort.
TEST(SingleCopyPathTest, AbortStillWaitsForARunningCopier) {
  Segment segment(2);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, true, false);
  CopierIs(segment.layout(), getpid());
  EXPECT_FALSE(PeerStopped(segment.layout().header(1)->liveness));
  steps.Abort();
  std::atomic<bool> copy_done{false};
  std::thread copier([&] {
    absl::SleepFor(absl::Milliseconds(300));  // far past the old grace
    copy_done = true;
    segment.layout().header(1)->copying_with.store(0);
  });
  const absl::Status why = absl::CancelledError("aborted");
  const absl::Status st = path.Leave(Context(absl::Seconds(30)), why);
  const bool done_at_return = copy_done.load();
  copier.join();
  EXPECT_TRUE(done_at_return) << "returned while the copier still copied";
  EXPECT_EQ(st, why);
  EXPECT_FALSE(
      st.GetPayload(SingleCopyPath::kBufferStillInUsePayload).has_value());
}

// After an abort, a copier whose heartbeat has stopped (frozen, or dead in
// another pid namespace) is not waited out.
TEST(SingleCopyPathTest, AbortEndsTheWaitForACopierWithoutHeartbeat) {
  Segment segment(2);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, true, false);
  CopierIs(segment.layout(), getpid());
  segment.layout().header(1)->liveness.heartbeat.store(7);  // never moves
  steps.Abort();
  const absl::Status st =
      path.Leave(Context(absl::Seconds(30)), absl::CancelledError("aborted"));
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rank 1 was still copying"))
      << st;
  EXPECT_EQ(st.GetPayload(SingleCopyPath::kBufferStillInUsePayload),
            absl::Cord("1"));
}

// A copier that exited copies nothing more: no wait, and the buffer is free.
TEST(SingleCopyPathTest, ExitedCopierIsNotWaitedFor) {
  Segment segment(2);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, true, false);
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  CopierIs(segment.layout(), child);
  steps.Abort();
  const absl::Status why = absl::CancelledError("aborted");
  EXPECT_EQ(path.Leave(Context(absl::Seconds(30)), why), why);
}

TEST(SingleCopyPathTest, BoundRunOutKeepsTheCodeAndNamesTheCopier) {
  Segment segment(3);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, true, false);
  segment.layout().header(2)->copying_with.store(1);
  const absl::Time start = absl::Now();
  // Clamped up to kRetractWaitMin.
  const absl::Status st = path.Leave(Context(absl::Seconds(1)),
                                     absl::DeadlineExceededError("timed out"));
  EXPECT_GE(absl::Now() - start, SingleCopyPath::kRetractWaitMin);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_TRUE(absl::StartsWith(st.message(), "timed out; ")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rank 2 was still copying"))
      << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "may still be read or written"))
      << st;
  EXPECT_EQ(st.GetPayload(SingleCopyPath::kBufferStillInUsePayload),
            absl::Cord("2"));
}

// The operation's own payloads travel with the added one.
TEST(SingleCopyPathTest, StillInUseKeepsTheOperationsPayloads) {
  Segment segment(2);
  ShmSteps steps(segment.layout(), /*rank=*/0);
  SingleCopyPath path(&steps, true, false);
  const pid_t child = SleepingChild();
  ASSERT_GT(child, 0);
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, WUNTRACED), child);
  CopierIs(segment.layout(), child);
  steps.Abort();
  absl::Status why = absl::CancelledError("aborted");
  why.SetPayload("type.test/why", absl::Cord("x"));
  const absl::Status st = path.Leave(Context(absl::Seconds(30)), why);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(st.GetPayload("type.test/why"), absl::Cord("x"));
  EXPECT_EQ(st.GetPayload(SingleCopyPath::kBufferStillInUsePayload),
            absl::Cord("1"));
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

// Ranks 0 and 2 at step 100 (rank 1 at 0), rank 0's buffer as given.
void PassedEveryStep(const ShmLayout& layout, uint64_t buffer0) {
  for (int r : {0, 2}) {
    ShmRankHeader* h = layout.header(r);
    h->step.store(100);
    h->turns[0].step.store(100);
    h->turns[1].step.store(100);
  }
  layout.header(0)->buffer.store(buffer0);
}

// Rank 1's single-copy all_reduce (it copies with rank 0's buffer).
absl::Status AllReduceOnRank1(SingleCopyPath& path) {
  std::vector<float> data(1 << 16, 1.0f);
  absl::StatusOr<ReduceFn> fn = GetReduceFn(DataType::kFloat32, ReduceOp::kSum);
  if (!fn.ok()) return fn.status();
  return AllReduceBySingleCopy(
      path, Context(absl::Seconds(5)),
      TensorRef(data.data(), data.size(), DataType::kFloat32), *fn);
}

// Rank 2's error when it waits for rank 1's step, which will not come.
absl::Status ThirdRankWaits(const ShmLayout& layout) {
  const OpContext ctx = Context(absl::Seconds(5));
  for (int r : {2}) {
    layout.header(r)->step.store(0);
    layout.header(r)->turns[0].step.store(0);
    layout.header(r)->turns[1].step.store(0);
  }
  ShmSteps third(layout, /*rank=*/2);
  if (absl::Status st = third.Step(ctx); !st.ok()) return st;  // step 1
  return third.Step(ctx);
}

// Rank 1 folds its slice of an all_reduce while rank 0 (which passed every
// step) has retracted its buffer: the group's failure names rank 0, whether
// rank 0 marked it already (its own copy failed) or not (it timed out, was
// aborted, or saw another rank exit); a third rank waiting at a step is
// told so.
void CopierFindsRetracted(bool owner_marked) {
  Segment segment(3);
  const ShmLayout& layout = segment.layout();
  PassedEveryStep(layout, kRetractedBuffer);
  if (owner_marked) layout.group()->failed_by.store(1);
  ShmSteps steps(layout, /*rank=*/1);
  SingleCopyPath path(&steps, true, false);
  const absl::Status st = AllReduceOnRank1(path);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "retracted its buffer")) << st;
  EXPECT_FALSE(st.GetPayload("type.distkit/shm.peer_retracted").has_value());
  // Rank 0 (a FailGroup's mark, or the copier's weaker one), not 2 (rank
  // 1, the copier).
  EXPECT_EQ(layout.group()->failed_by.load(), owner_marked ? 1 : -1);
  const absl::Status waited = ThirdRankWaits(layout);
  EXPECT_TRUE(absl::StrContains(
      waited.message(), owner_marked ? "rank 0 failed inside the operation"
                                     : "rank 0 left the operation with an "
                                       "error"))
      << waited;
}

TEST(SingleCopyPathTest, CopierNamesTheOwnerThatRetracted) {
  CopierFindsRetracted(/*owner_marked=*/false);
}

TEST(SingleCopyPathTest, CopierKeepsTheOwnersMark) {
  CopierFindsRetracted(/*owner_marked=*/true);
}

// A rank whose call went another way publishes no buffer (0): a copier's
// failure then is its own, not the owner's.
TEST(SingleCopyPathTest, NoBufferPublishedIsNotTheOwnersFailure) {
  Segment segment(3);
  const ShmLayout& layout = segment.layout();
  PassedEveryStep(layout, 0);
  ShmSteps steps(layout, /*rank=*/1);
  SingleCopyPath path(&steps, true, false);
  const absl::Status st = AllReduceOnRank1(path);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "published no buffer")) << st;
  EXPECT_FALSE(absl::StrContains(st.message(), "retracted")) << st;
  EXPECT_EQ(layout.group()->failed_by.load(), 2);  // 1 + rank 1
  const absl::Status waited = ThirdRankWaits(layout);
  EXPECT_TRUE(
      absl::StrContains(waited.message(), "rank 1 failed inside the operation"))
      << waited;
}

TEST(SingleCopyPathTest, FirstFailureIsKept) {
  Segment segment(3);
  ShmSteps one(segment.layout(), 1), two(segment.layout(), 2);
  EXPECT_EQ(one.FailGroup(absl::InternalError("first")).message(), "first");
  EXPECT_FALSE(two.FailGroup(absl::InternalError("second")).ok());
  EXPECT_EQ(segment.layout().group()->failed_by.load(), 2);  // 1 + rank 1
}

// A copier's mark of a retracted buffer's owner does not lock out the rank
// whose own operation failed; it locks out another copier's mark.
TEST(SingleCopyPathTest, FailGroupReplacesACopiersMark) {
  Segment segment(4);
  ShmSteps one(segment.layout(), 1), two(segment.layout(), 2),
      three(segment.layout(), 3);
  one.MarkRetractedBy(0);
  EXPECT_EQ(segment.layout().group()->failed_by.load(), -1);
  three.MarkRetractedBy(2);
  EXPECT_EQ(segment.layout().group()->failed_by.load(), -1);
  EXPECT_FALSE(two.FailGroup(absl::InternalError("own read")).ok());
  EXPECT_EQ(segment.layout().group()->failed_by.load(), 3);  // 1 + rank 2
  EXPECT_FALSE(three.FailGroup(absl::InternalError("later")).ok());
  one.MarkRetractedBy(0);
  EXPECT_EQ(segment.layout().group()->failed_by.load(), 3);
}

// Rank 3 exited before the step; rank 0 left because of it (no FailGroup:
// a liveness error) and a copier marked rank 0. A waiter names rank 3.
void ExitedRankIsNamedBeforeTheMarked(int32_t failed_by) {
  Segment segment(4);
  const ShmLayout& layout = segment.layout();
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  LivenessRecord& dead = layout.header(3)->liveness;
  dead.pid_namespace.store(ThisPidNamespace());
  dead.pid.store(child);
  dead.heartbeat.store(kNoHeartbeat);
  for (int r : {0, 1}) {
    layout.header(r)->step.store(1);
    layout.header(r)->turns[0].step.store(1);
  }
  layout.group()->failed_by.store(failed_by);
  ShmSteps waiter(layout, /*rank=*/2);
  const absl::Status st = waiter.Step(Context(absl::Seconds(5)));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "rank 3 (pid")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "exited")) << st;
  EXPECT_FALSE(absl::StrContains(st.message(), "rank 0")) << st;
}

TEST(SingleCopyPathTest, ExitedRankIsNamedBeforeACopiersMark) {
  ExitedRankIsNamedBeforeTheMarked(-1);
}

TEST(SingleCopyPathTest, ExitedRankIsNamedBeforeAFailedRank) {
  ExitedRankIsNamedBeforeTheMarked(1);
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
