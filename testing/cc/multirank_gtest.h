// gtest cases that every rank of a real job runs (dk_multirank_test): link
// //testing/cc:multirank_gtest, whose main joins the job (rank_env.h's
// JoinJob, defaults) before the first case and leaves it with the other
// ranks (a world barrier) after the last, so no rank tears down connections
// a peer still uses.

#ifndef DISTKIT_TESTING_CC_MULTIRANK_GTEST_H_
#define DISTKIT_TESTING_CC_MULTIRANK_GTEST_H_

#include "cc/group/process_group.h"
#include "testing/cc/rank_env.h"

namespace distkit {
namespace testing {

// The job the main joined.
RankEnv& JoinedJob();

inline ProcessGroup& World() { return *JoinedJob().world; }
inline int Rank() { return World().rank(); }
inline int Size() { return World().size(); }

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_MULTIRANK_GTEST_H_
