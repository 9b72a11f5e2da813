#include "cc/comm/hierarchical/link_pipeline.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(LinkPipeline, MovesEveryChunkInOrderOnceReady) {
  std::vector<int> moved;
  std::atomic<int> moving{-1};
  LinkPipeline link(4, [&](int k) {
    moving = k;
    moved.push_back(k);
    return absl::OkStatus();
  });
  for (int k = 0; k < 4; ++k) {
    // Chunk k does not move before it is ready.
    absl::SleepFor(absl::Milliseconds(5));
    EXPECT_EQ(moving.load(), k - 1);
    link.Ready(k);
    ASSERT_TRUE(link.Done(k).ok());
  }
  EXPECT_EQ(moved, (std::vector<int>{0, 1, 2, 3}));
}

TEST(LinkPipeline, OverlapsTheCallersWork) {
  // The link moves chunk 0 while the caller prepares chunk 1.
  absl::Notification prepared;
  LinkPipeline link(2, [&](int k) {
    if (k == 0) prepared.WaitForNotification();
    return absl::OkStatus();
  });
  link.Ready(0);
  prepared.Notify();  // would hang if chunk 0 ran on this thread
  link.Ready(1);
  EXPECT_TRUE(link.Done(0).ok());
  EXPECT_TRUE(link.Done(1).ok());
}

TEST(LinkPipeline, OneChunkRunsOnTheCallersThread) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran;
  LinkPipeline link(1, [&](int) {
    ran = std::this_thread::get_id();
    return absl::OkStatus();
  });
  link.Ready(0);
  EXPECT_EQ(ran, caller);
  EXPECT_TRUE(link.Done(0).ok());
}

TEST(LinkPipeline, AFailureEndsEveryLaterChunk) {
  std::vector<int> moved;
  LinkPipeline link(3, [&](int k) {
    moved.push_back(k);
    return k == 1 ? absl::UnavailableError("peer gone") : absl::OkStatus();
  });
  for (int k = 0; k < 3; ++k) link.Ready(k);
  EXPECT_TRUE(link.Done(0).ok());
  EXPECT_EQ(link.Done(1).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(link.Done(2).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(moved, (std::vector<int>{0, 1}));
}

TEST(LinkPipeline, StopEndsTheWaitForAChunkNeverReady) {
  std::atomic<int> calls{0};
  {
    LinkPipeline link(3, [&](int) {
      ++calls;
      return absl::OkStatus();
    });
    link.Ready(0);
    EXPECT_TRUE(link.Done(0).ok());
    link.Stop();
    EXPECT_EQ(link.Done(1).code(), absl::StatusCode::kCancelled);
  }  // joins: the thread no longer waits for chunk 1
  EXPECT_EQ(calls.load(), 1);
}

TEST(LinkPipeline, StopMovesNoChunkMadeReadyBefore) {
  // Chunk 1 is ready while chunk 0 is on the link; Stop() then comes: once
  // chunk 0's call returns, no further chunk moves.
  std::atomic<int> calls{0};
  absl::Notification in_chunk0, release0;
  {
    LinkPipeline link(3, [&](int k) {
      ++calls;
      if (k == 0) {
        in_chunk0.Notify();
        release0.WaitForNotification();
      }
      return absl::OkStatus();
    });
    link.Ready(0);
    link.Ready(1);
    in_chunk0.WaitForNotification();
    link.Stop();
    release0.Notify();
    EXPECT_EQ(link.Done(1).code(), absl::StatusCode::kCancelled);
  }  // joins: the thread has ended
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace distkit
