// The main of multirank_gtest.h's cases.

#include <cstdio>
#include <utility>

#include "gtest/gtest.h"
#include "testing/cc/multirank_gtest.h"

namespace distkit {
namespace testing {
namespace {

RankEnv* joined_job = nullptr;

}  // namespace

RankEnv& JoinedJob() { return *joined_job; }

}  // namespace testing
}  // namespace distkit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  absl::StatusOr<distkit::testing::RankEnv> joined =
      distkit::testing::JoinJob();
  if (!joined.ok()) {
    fprintf(stderr, "cannot join the job: %s\n",
            joined.status().ToString().c_str());
    return 1;
  }
  distkit::testing::joined_job =
      new distkit::testing::RankEnv(*std::move(joined));
  const int result = RUN_ALL_TESTS();
  // Leave together, so no rank tears down connections a peer still uses.
  (void)distkit::testing::World().Barrier();
  return result;
}
