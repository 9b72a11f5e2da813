// Joins the job this process was launched into (distrun / the multi-rank
// harness): parses the launcher's variables, connects to the job store, and
// creates the world ProcessGroup. For C++ multi-rank tests.

#ifndef DISTKIT_TESTING_CC_RANK_ENV_H_
#define DISTKIT_TESTING_CC_RANK_ENV_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cc/group/process_group.h"
#include "cc/launch/launcher.h"
#include "cc/store/store.h"

namespace distkit {
namespace testing {

struct RankEnv {
  RendezvousInfo info;
  std::shared_ptr<Store> store;
  std::shared_ptr<ProcessGroup> world;
};

// `timeout` is the world group's per-operation timeout; `backend` its
// backend's registry name; `connect_timeout` how long creating the world
// waits for the ranks (zero: `timeout`). A test of short op timeouts gives
// joining its own long bound: a loaded machine's start-up is not what it
// checks.
absl::StatusOr<RankEnv> JoinJob(
    absl::Duration timeout = absl::Seconds(60),
    const std::string& backend = "gloo",
    absl::Duration connect_timeout = absl::ZeroDuration());

// JoinJob's first half: the launcher's variables and the job store (60 s to
// connect), DISTKIT_HOST_ID from DISTKIT_TEST_HOSTS, no world yet. For a
// test whose ranks must meet before the world's own bound starts.
absl::StatusOr<RankEnv> ConnectJob();

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_RANK_ENV_H_
