#include "cc/comm/hierarchical/chunk_plan.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(ChunkPlan, NotCutBelowTwoChunks) {
  EXPECT_EQ(ChunkPlan(1000, 2 * ChunkPlan::kChunkBytes - 1).chunks(), 1);
  EXPECT_EQ(ChunkPlan(1000, 2 * ChunkPlan::kChunkBytes).chunks(), 2);
}

TEST(ChunkPlan, ChunksCoverTheCountInOrder) {
  const ChunkPlan plan(1001, 7 * ChunkPlan::kChunkBytes);
  ASSERT_EQ(plan.chunks(), 7);
  int64_t next = 0, most = 0;
  for (int k = 0; k < plan.chunks(); ++k) {
    EXPECT_EQ(plan.begin(k), next);
    EXPECT_GE(plan.size(k), 1001 / 7);
    next += plan.size(k);
    most = std::max(most, plan.size(k));
  }
  EXPECT_EQ(next, 1001);
  EXPECT_EQ(plan.most(), most);
}

TEST(ChunkPlan, NeverMoreChunksThanElementsOrTheCap) {
  EXPECT_EQ(ChunkPlan(3, 100 * ChunkPlan::kChunkBytes).chunks(), 3);
  EXPECT_EQ(ChunkPlan(1 << 20, 1000 * ChunkPlan::kChunkBytes).chunks(),
            ChunkPlan::kMaxChunks);
}

}  // namespace
}  // namespace distkit
