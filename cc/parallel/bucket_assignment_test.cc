#include "cc/parallel/bucket_assignment.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

using ::testing::ElementsAre;

TEST(BucketAssignmentTest, ReverseOrderWithSmallFirstBucket) {
  // Four float32 parameters of 1 KiB each; first bucket 1 KiB, others 2 KiB.
  std::vector<ParamShape> p(4, {256, DataType::kFloat32});
  auto buckets = AssignBuckets(p, ReverseOrder(4), 1024, 2048);
  EXPECT_THAT(buckets,
              ElementsAre(ElementsAre(3), ElementsAre(2, 1), ElementsAre(0)));
}

TEST(BucketAssignmentTest, DtypesNeverShareABucket) {
  std::vector<ParamShape> p = {{10, DataType::kFloat32},
                               {10, DataType::kFloat64},
                               {10, DataType::kFloat32},
                               {10, DataType::kFloat64}};
  auto buckets = AssignBuckets(p, {0, 1, 2, 3}, 1 << 20, 1 << 20);
  EXPECT_THAT(buckets, ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3)));
}

TEST(BucketAssignmentTest, AGivenOrderIsKept) {
  std::vector<ParamShape> p(5, {100, DataType::kFloat32});
  auto buckets = AssignBuckets(p, {2, 0, 4, 1, 3}, 400, 800);
  EXPECT_THAT(buckets, ElementsAre(ElementsAre(2), ElementsAre(0, 4),
                                   ElementsAre(1, 3)));
}

TEST(BucketAssignmentTest, OversizedParameterGetsItsOwnBucket) {
  std::vector<ParamShape> p = {{10, DataType::kFloat32},
                               {1 << 20, DataType::kFloat32},
                               {10, DataType::kFloat32}};
  auto buckets = AssignBuckets(p, ReverseOrder(3), 1 << 20, 1 << 20);
  EXPECT_THAT(buckets, ElementsAre(ElementsAre(2, 1), ElementsAre(0)));
}

}  // namespace
}  // namespace distkit
