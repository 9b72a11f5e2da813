#include "cc/comm/hierarchical/chunk_plan.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(ChunkPlan, NotCutBelowTwoChunks) {
  const ChunkPlan one(1000, 2 * ChunkPlan::kChunkBytes - 1);
  ASSERT_EQ(one.chunks(), 1);
  EXPECT_EQ(one.size(0), 1000);
  EXPECT_EQ(one.most(), 1000);
  EXPECT_EQ(ChunkPlan(0, 0).chunks(), 1);
}

TEST(ChunkPlan, RampsUpToFullChunksAndBackDown) {
  // 8 full chunks' worth: 1, 2, 4, 8 x 6, 4, 2, 1 eighths (62 in all).
  const int64_t count = 62 << 10;
  const ChunkPlan plan(count, 8 * ChunkPlan::kChunkBytes);
  ASSERT_EQ(plan.chunks(), 12);
  const int64_t eighth = 1 << 10;
  const int64_t want[] = {1, 2, 4, 8, 8, 8, 8, 8, 8, 4, 2, 1};
  int64_t next = 0;
  for (int k = 0; k < plan.chunks(); ++k) {
    EXPECT_EQ(plan.begin(k), next);
    EXPECT_EQ(plan.size(k), want[k] * eighth) << k;
    next += plan.size(k);
  }
  EXPECT_EQ(next, count);
  EXPECT_EQ(plan.most(), 8 * eighth);
}

TEST(ChunkPlan, UnevenCountsAreCoveredWholeInOrder) {
  const ChunkPlan plan(1001, 7 * ChunkPlan::kChunkBytes);
  ASSERT_EQ(plan.chunks(), 11);
  int64_t next = 0, most = 0;
  for (int k = 0; k < plan.chunks(); ++k) {
    EXPECT_EQ(plan.begin(k), next);
    EXPECT_GE(plan.size(k), 1);
    next += plan.size(k);
    most = std::max(most, plan.size(k));
  }
  EXPECT_EQ(next, 1001);
  EXPECT_EQ(plan.most(), most);
}

TEST(ChunkPlan, NoEmptyChunksAndAtMostTheCap) {
  const ChunkPlan few(3, 100 * ChunkPlan::kChunkBytes);
  EXPECT_EQ(few.chunks(), 3);
  for (int k = 0; k < few.chunks(); ++k) EXPECT_EQ(few.size(k), 1);
  EXPECT_EQ(ChunkPlan(1 << 20, 1000 * ChunkPlan::kChunkBytes).chunks(),
            ChunkPlan::kMaxChunks);
}

}  // namespace
}  // namespace distkit
