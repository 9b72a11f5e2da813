#include "cc/group/op_queue.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace distkit {
namespace {

// Posted and inline operations run in the order they were submitted.
TEST(OpQueueTest, RunsInSubmissionOrder) {
  OpQueue queue;
  std::vector<int> ran;  // written only by the ops, one at a time
  int next = 0;
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < round % 4; ++i) {
      queue.Post([&ran, n = next++] { ran.push_back(n); });
    }
    queue.Run([&ran, n = next++] { ran.push_back(n); });
  }
  ASSERT_EQ(ran.size(), static_cast<size_t>(next));
  for (int i = 0; i < next; ++i) EXPECT_EQ(ran[i], i);
}

// Operations from several threads, inline and posted, never overlap, and
// each sees what the one before it wrote (a plain counter; ThreadSanitizer
// checks the ordering in the tsan phase).
TEST(OpQueueTest, OperationsNeverOverlap) {
  OpQueue queue;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  int64_t count = 0;
  std::atomic<int> spin{0};
  auto op = [&] {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    // Long enough for another caller to come in while this runs.
    for (int i = 0; i < 64; ++i) spin.fetch_add(1, std::memory_order_relaxed);
    ++count;
    inside.fetch_sub(1);
  };
  constexpr int kThreads = 4, kRuns = 50000, kPosts = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRuns; ++i) queue.Run(op);
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < kPosts; ++i) queue.Post(op);
  });
  for (std::thread& t : threads) t.join();
  queue.Run([] {});  // after every post
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(count, int64_t{kThreads} * kRuns + kPosts);
}

}  // namespace
}  // namespace distkit
