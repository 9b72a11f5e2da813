#include "cc/comm/work.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(WorkTest, CompletesOnceAndWakesWaiters) {
  Work w("all_reduce #1 on group 'world'");
  EXPECT_FALSE(w.Test());
  EXPECT_EQ(w.state(), WorkState::kPending);
  absl::Status timed_out = w.Wait(absl::Milliseconds(50));
  EXPECT_EQ(timed_out.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(timed_out.message().find("all_reduce #1"), absl::string_view::npos);
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(50));
    w.Complete(absl::UnavailableError("peer died"));
  });
  EXPECT_EQ(w.Wait().code(), absl::StatusCode::kUnavailable);
  t.join();
  w.Complete(absl::OkStatus());  // ignored
  EXPECT_EQ(w.state(), WorkState::kFailed);
  EXPECT_EQ(w.status().message(), "peer died");
}

TEST(WorkTest, CallbacksRunOnceOnTheCompletingThreadAfterWaitersCanSee) {
  Work w("broadcast #2 on group 'world'");
  std::thread::id ran_on;
  int calls = 0;
  absl::Status seen;
  w.OnComplete([&](const absl::Status& s) {
    ++calls;
    seen = s;
    ran_on = std::this_thread::get_id();
    // The status is visible to the callback itself (no self-deadlock).
    EXPECT_TRUE(w.Test());
    EXPECT_EQ(w.state(), WorkState::kFailed);
  });
  int second = 0;
  w.OnComplete([&](const absl::Status&) { ++second; });
  EXPECT_EQ(calls, 0);
  std::thread::id completer;
  std::thread t([&] {
    completer = std::this_thread::get_id();
    w.Complete(absl::DeadlineExceededError("late"));
  });
  t.join();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(second, 1);
  EXPECT_EQ(ran_on, completer);
  EXPECT_EQ(seen.code(), absl::StatusCode::kDeadlineExceeded);
  w.Complete(absl::OkStatus());  // ignored: no second call
  EXPECT_EQ(calls, 1);
}

TEST(WorkTest, CallbackOnAFinishedWorkRunsAtOnceOnTheCaller) {
  Work w("barrier #3 on group 'world'");
  w.Complete(absl::OkStatus());
  bool ran = false;
  w.OnComplete([&](const absl::Status& s) {
    ran = s.ok();
    EXPECT_TRUE(w.Wait(absl::ZeroDuration()).ok());
  });
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace distkit
