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

}  // namespace
}  // namespace distkit
