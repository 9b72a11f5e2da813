// A rank that leaves a single-copy all_reduce with an error must not leave
// while a peer still copies into its buffer (SingleCopyPath::Leave). Rank 1
// is held inside its copy window of its write-back into rank 0's buffer
// (DISTKIT_SHM_TEST_COPY_HOOK, single_copy_test_hook.h) while rank 0's
// operation fails:
//   own_read     rank 0's own read of the last rank fails (world sizes 2-4);
//   peer_failed  rank 2's read of rank 0 fails, so rank 0's last step ends
//                with the group's failure (world sizes 3 and 4).
//   abort        as own_read, but rank 1 is held for 20 s and rank 0's
//                group is aborted (another thread) once rank 1 is inside
//                (world sizes 2 and 3).
// Once its call has returned, rank 0 fills its buffer with a sentinel and
// only then lets rank 1 go on (a file); when every other rank's call has
// returned too (their marks), the sentinel must be intact. Before the fix
// rank 0 returned at once and rank 1's write, released by that file, landed
// in the buffer afterwards. Every order is made by events (files), none by
// a race against the clock: rank 1's hold ends by itself after 1 s, which
// only bounds the test's time where rank 0 waits for it. Under abort, rank
// 0's call must return within seconds of the abort, not at the end of rank
// 1's hold, and with DATA_LOSS naming rank 1 (its buffer is not free: the
// sentinel is not checked, and the buffer stays allocated).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"
#include "testing/cc/time_scale.h"

using distkit::testing::Check;
using distkit::testing::CheckOk;
using distkit::testing::Require;
using distkit::testing::Scaled;

namespace {

constexpr float kSentinel = 12345.0f;

std::string JobDir() {
  const char* tmp = getenv("TEST_TMPDIR");
  const char* job = getenv("DISTKIT_TOKEN");
  if (job == nullptr) job = getenv("MASTER_PORT");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/single_copy_retract.",
                   std::string(job != nullptr ? job : "job").substr(0, 16));
  mkdir(dir.c_str(), 0700);
  return dir;
}

void Touch(const std::string& path) {
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) close(fd);
}

bool AwaitFiles(const std::vector<std::string>& paths, absl::Duration limit) {
  const absl::Time give_up = absl::Now() + limit;
  for (const std::string& p : paths) {
    while (access(p.c_str(), F_OK) != 0) {
      if (absl::Now() >= give_up) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  Require(mode == "own_read" || mode == "peer_failed" || mode == "abort",
          "mode is own_read, peer_failed or abort");
  const bool abort = mode == "abort";
  const int rank = atoi(getenv("RANK"));
  const int size = atoi(getenv("WORLD_SIZE"));
  testing::SetCheckRank(rank);
  Require(size >= (mode == "peer_failed" ? 3 : 2), "enough ranks");
  const std::string dir = JobDir();
  const std::string entered = dir + "/entered";    // rank 1 is in its window
  const std::string released = dir + "/released";  // rank 0 wrote its sentinel
  // Single copy at any size and world size (rank 0's environment decides);
  // the hooks are read when the group is made.
  setenv("DISTKIT_SHM_SINGLE_COPY", "1", 1);
  std::string hook;
  if (rank == 1) {
    hook = absl::StrCat("write:0:pause:", entered, ":", released,
                        abort ? ":20000" : "");
  } else if (rank == 0 && (mode == "own_read" || abort)) {
    hook = absl::StrCat("read:", size - 1, ":fail_after:", entered);
  } else if (rank == 2 && mode == "peer_failed") {
    hook = absl::StrCat("read:0:fail_after:", entered);
  }
  if (!hook.empty()) setenv("DISTKIT_SHM_TEST_COPY_HOOK", hook.c_str(), 1);

  absl::StatusOr<testing::RankEnv> env =
      testing::JoinJob(absl::Seconds(30), "gloo", absl::Seconds(60));
  testing::RequireOk(env.status(), "join the job");
  ProcessGroup& world = *env->world;

  // 1 MiB: every rank's slice is at least two pieces of the fold (128 KiB).
  std::vector<float> data(1 << 18, 1.0f);
  // Under abort: rank 0 aborts its group once rank 1 is inside its copy.
  absl::Time aborted_at = absl::InfiniteFuture();
  std::thread aborter;
  if (abort && rank == 0) {
    aborter = std::thread([&] {
      if (AwaitFiles({entered}, Scaled(absl::Seconds(30)))) {
        absl::SleepFor(absl::Milliseconds(50));
        aborted_at = absl::Now();
        world.Abort();
      }
    });
  }
  const absl::Status st = world.AllReduce(
      TensorRef(data.data(), data.size(), DataType::kFloat32), ReduceOp::kSum);
  const absl::Time returned_at = absl::Now();
  if (aborter.joinable()) aborter.join();
  printf("rank %d: all_reduce: %s\n", rank, st.ToString().c_str());
  Check(!st.ok(), "the all_reduce fails on every rank");
  if (rank == 0 && abort) {
    Require(aborted_at != absl::InfiniteFuture(), "rank 1 entered its copy");
    // The old wait ran until rank 1's hold ended (20 s).
    Check(returned_at - aborted_at < Scaled(absl::Seconds(5)),
          absl::StrCat("returned ",
                       absl::FormatDuration(returned_at - aborted_at),
                       " after the abort"));
    Check(st.code() == absl::StatusCode::kDataLoss &&
              absl::StrContains(st.message(), "rank 1 was still copying") &&
              absl::StrContains(st.message(), "may still be read or written"),
          absl::StrCat("DATA_LOSS naming rank 1, not ", st.ToString()));
    Touch(released);  // `data` stays allocated until the process ends
    std::vector<std::string> marks;
    for (int r = 1; r < size; ++r)
      marks.push_back(absl::StrCat(dir, "/done.", r));
    Require(AwaitFiles(marks, Scaled(absl::Seconds(30))),
            "every other rank's call returned");
  } else if (rank == 0) {
    Check(st.code() == absl::StatusCode::kUnavailable,
          absl::StrCat("UNAVAILABLE, not ", st.ToString()));
    Check(st.message().find("still copying") == std::string::npos,
          "no peer was left copying");
    // The caller owns its buffer again: reuse it, then let rank 1 go on.
    for (float& x : data) x = kSentinel;
    Touch(released);
    std::vector<std::string> marks;
    for (int r = 1; r < size; ++r)
      marks.push_back(absl::StrCat(dir, "/done.", r));
    Require(AwaitFiles(marks, Scaled(absl::Seconds(30))),
            "every other rank's call returned");
    size_t changed = 0;
    for (float x : data) changed += x != kSentinel;
    Check(changed == 0,
          absl::StrCat(changed, " of ", data.size(),
                       " floats of rank 0's buffer changed after its "
                       "all_reduce returned"));
  } else {
    Touch(absl::StrCat(dir, "/done.", rank));
  }
  return testing::FinishChecks(absl::StrCat("single copy retract ", mode));
}
