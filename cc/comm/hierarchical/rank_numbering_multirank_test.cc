// Errors of a group that spans hosts name the ranks the user knows. The
// hierarchical backend runs on parts that number their ranks from 0 (each
// host's group, the group of host leaders); their messages must still name
// world ranks and the host. Run at world size 4 as 2 "hosts" of 2
// (DISTKIT_TEST_HOSTS=2): world ranks 2 and 3 are ranks 0 and 1 of their
// host's group, and rank 2 is rank 1 of the leaders', so a leaked inner
// number is a wrong one. Modes (argv[1]):
//   connect      the ranks of host 1 cannot listen (DISTKIT_GLOO_HOSTNAME is
//                an address no interface has): each rank's error names its
//                world rank and host, never "rank 1 of 2" (issue 37)
//   dead_leader  world rank 0, host 0's leader, exits in an all_reduce:
//                host 1's leader fails among the leaders and fails its host's
//                group; rank 3 hears "rank 2 failed", not "rank 0"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/core/status.h"
#include "cc/group/process_group.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"
#include "testing/cc/store_marks.h"
#include "testing/cc/time_scale.h"

namespace distkit {
namespace {

using testing::Check;
using testing::Require;

// What each rank's message must say about itself.
std::string Self(int rank, int size) {
  return absl::StrCat("rank ", rank, " on host test-host-", rank * 2 / size);
}

int Connect(int rank, int size) {
  if (rank * 2 / size == 1) setenv("DISTKIT_GLOO_HOSTNAME", "192.0.2.1", 1);
  // Joins as testing::JoinJob does, but every rank is started before the
  // world's 2 s begin: that bound is for rank 0's wait for rank 2 among the
  // leaders, not for a loaded machine starting the ranks (a rank 2 s late
  // failed the others in the host-map gather instead).
  absl::StatusOr<testing::RankEnv> env = testing::ConnectJob();
  testing::RequireOk(env.status(), "the job store");
  testing::MarkAndAwaitAll(*env->store, "started", rank, size,
                           absl::Seconds(60));
  GroupOptions options;
  options.timeout = testing::Scaled(absl::Seconds(2));
  options.local_rank = env->info.local_rank;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> world =
      ProcessGroup::CreateWorld(env->store, rank, size, options);
  Require(!world.ok(), "joining fails where host 1 cannot listen");
  const std::string msg(world.status().message());
  printf("rank %d: %s\n", rank, world.status().ToString().c_str());
  Check(absl::StrContains(msg, Self(rank, size)),
        absl::StrCat("the error names '", Self(rank, size), "': ", msg));
  Check(!absl::StrContains(msg, " of 2"), "no inner group's size: " + msg);
  if (rank * 2 / size == 1) {
    Check(absl::StrContains(msg, "listening on 192.0.2.1") ||
              absl::StrContains(msg, "could not listen on 192.0.2.1"),
          "the error names the address it could not listen on: " + msg);
  }
  if (rank == 0) {
    // Host 0's leader waits among the leaders for host 1's: world rank 2.
    Check(absl::StrContains(msg, "waiting for the address of rank 2"),
          "names the peer it waited for by its world rank: " + msg);
  }
  return testing::FinishChecks("errors at connection name world ranks");
}

int DeadLeader(int rank, int size) {
  absl::StatusOr<testing::RankEnv> env = testing::JoinJob(absl::Seconds(30));
  testing::RequireOk(env.status(), "join");
  ProcessGroup& world = *env->world;
  testing::RequireOk(world.Barrier(), "everyone is connected first");
  if (rank == 0) _exit(0);  // gone, without a word
  // 4 MiB: the data crosses every stage (host, leaders, host).
  std::vector<float> data(1 << 20, 1.0f);
  absl::Status st = world.AllReduce(
      TensorRef(data.data(), data.size(), DataType::kFloat32), ReduceOp::kSum);
  printf("rank %d: %s\n", rank, st.ToString().c_str());
  const std::string msg(st.message());
  Check(st.code() == absl::StatusCode::kUnavailable, "UNAVAILABLE: " + msg);
  Check(absl::StrContains(msg, Self(rank, size)),
        absl::StrCat("the error names '", Self(rank, size), "': ", msg));
  if (rank == 1) {
    Check(absl::StrContains(msg, "rank 0 (pid "),
          "names the dead rank: " + msg);
  }
  if (rank == 3) {
    // Host 1's leader (world rank 2, rank 0 of the host's group) failed.
    Check(absl::StrContains(msg, "rank 2 failed inside the operation"),
          "names the host's failed leader by its world rank: " + msg);
  }
  // Nobody leaves before every survivor has its error (a survivor gone
  // early would be what the others report).
  (void)env->store->Set(absl::StrCat("checked/", rank), "1");
  std::vector<std::string> survivors;
  for (int r = 1; r < size; ++r)
    survivors.push_back(absl::StrCat("checked/", r));
  Check(env->store->Wait(survivors, absl::Seconds(30)).ok(),
        "every survivor reports");
  _exit(testing::FinishChecks("errors in an operation name world ranks"));
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  const int rank = atoi(getenv("RANK"));
  const int size = atoi(getenv("WORLD_SIZE"));
  distkit::testing::SetCheckRank(rank);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (size != 4 || getenv("DISTKIT_TEST_HOSTS") == nullptr ||
      std::string(getenv("DISTKIT_TEST_HOSTS")) != "2") {
    fprintf(stderr, "run at world size 4 with DISTKIT_TEST_HOSTS=2\n");
    return 2;
  }
  if (mode == "connect") return distkit::Connect(rank, size);
  if (mode == "dead_leader") return distkit::DeadLeader(rank, size);
  fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
  return 2;
}
