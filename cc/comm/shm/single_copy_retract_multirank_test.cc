// A rank that leaves a single-copy all_reduce with an error must not leave
// while a peer still copies into its buffer (SingleCopyPath::Leave). Rank 1
// is held inside its copy window of its write-back into rank 0's buffer
// (DISTKIT_SHM_TEST_COPY_HOOK, single_copy_test_hook.h) while rank 0's
// operation fails:
//   own_read       rank 0's own read of the last rank fails (world sizes
//                  2-4);
//   peer_failed    rank 2's read of rank 0 fails, so rank 0's last step
//                  ends with the group's failure (world sizes 3 and 4);
//   abort          as own_read, but rank 1 stops itself (SIGSTOP) inside
//                  its window and rank 0's group is aborted (another
//                  thread) once rank 1 is stopped (world sizes 2 and 3);
//   abort_running  as own_read, but rank 0's group is aborted (once its
//                  own read failed) while rank 1 is held, alive, in its
//                  window, and rank 1 goes on only 500 ms after the abort
//                  (world sizes 2 and 3).
// Once its call has returned, rank 0 fills its buffer with a sentinel and
// only then lets rank 1 go on (a file); when every other rank's call has
// returned too (their marks), the sentinel must be intact. Before the fix
// rank 0 returned at once and rank 1's write, released by that file, landed
// in the buffer afterwards. Every order is made by events (files), none by
// a race against the clock: rank 1's hold ends by itself after 1 s, which
// only bounds the test's time where rank 0 waits for it. Under abort_running
// rank 0 must wait for rank 1 whatever the abort (a copier only descheduled
// would otherwise write into a freed buffer; fad3e1b gave up 20 ms after the
// abort): the sentinel is checked as under own_read. In both abort modes the
// abort comes once rank 0's own read has failed (a file): its call is then
// past the steps that an abort ends with CANCELLED, and waits for its
// copiers or is about to. Under abort, rank 0's call must return within
// seconds of the abort (rank 1 stays stopped until then), with its own
// code (UNAVAILABLE: its read failed), naming rank 1 as still copying
// (message and payload): its buffer is not free, so the sentinel is not
// checked and the buffer stays allocated; rank 0 then continues rank 1
// (SIGCONT).

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cc/comm/shm/single_copy_path.h"
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

// The pid rank 1's hook wrote into `entered` (0: none).
int PidIn(const std::string& path) {
  std::ifstream in(path);
  int pid = 0;
  in >> pid;
  return pid;
}

// Whether process `pid` is stopped (/proc state T or t).
bool Stopped(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  return line[paren + 2] == 'T' || line[paren + 2] == 't';
}

}  // namespace

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  Require(mode == "own_read" || mode == "peer_failed" || mode == "abort" ||
              mode == "abort_running",
          "mode is own_read, peer_failed, abort or abort_running");
  const bool abort = mode == "abort";
  const bool abort_running = mode == "abort_running";
  const int rank = atoi(getenv("RANK"));
  const int size = atoi(getenv("WORLD_SIZE"));
  testing::SetCheckRank(rank);
  Require(size >= (mode == "peer_failed" ? 3 : 2), "enough ranks");
  const std::string dir = JobDir();
  const std::string entered = dir + "/entered";    // rank 1 is in its window
  const std::string released = dir + "/released";  // rank 0 wrote its sentinel
  const std::string aborted = dir + "/aborted";    // 500 ms after the abort
  const std::string read_failed = dir + "/read_failed";  // rank 0's own read
  // Single copy at any size and world size (rank 0's environment decides);
  // the hooks are read when the group is made.
  setenv("DISTKIT_SHM_SINGLE_COPY", "1", 1);
  std::string hook;
  if (rank == 1 && abort) {
    hook = absl::StrCat("write:0:stop:", entered);
  } else if (rank == 1 && abort_running) {
    hook = absl::StrCat("write:0:pause:", entered, ":", aborted, ":20000");
  } else if (rank == 1) {
    hook = absl::StrCat("write:0:pause:", entered, ":", released);
  } else if (rank == 0 && mode != "peer_failed") {
    hook = absl::StrCat("read:", size - 1, ":fail_after:", entered, ":",
                        read_failed);
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
  // Under abort: rank 0 aborts its group once rank 1 is stopped inside its
  // copy; under abort_running, once rank 1 is inside it. Either way only
  // after rank 0's own read failed.
  absl::Time aborted_at = absl::InfiniteFuture();
  int stopped_pid = 0;
  std::thread aborter;
  if ((abort || abort_running) && rank == 0) {
    aborter = std::thread([&] {
      if (!AwaitFiles({entered}, Scaled(absl::Seconds(30)))) return;
      if (abort) {
        stopped_pid = PidIn(entered);
        const absl::Time give_up = absl::Now() + Scaled(absl::Seconds(30));
        while (stopped_pid > 0 && !Stopped(stopped_pid) &&
               absl::Now() < give_up) {
          absl::SleepFor(absl::Milliseconds(5));
        }
      }
      // And after rank 0's own read failed: the abort then meets its wait
      // for the copier (or the one it is about to start), and its own
      // failure is what it reports. Aborted before that read, while still
      // in a step, its call is CANCELLED instead, which a loaded machine
      // made happen (992b254); a fixed 50 ms after rank 1 entered its
      // window was no such order.
      if (!AwaitFiles({read_failed}, Scaled(absl::Seconds(30)))) return;
      aborted_at = absl::Now();
      world.Abort();
      if (abort_running) {
        // Far past fad3e1b's 20 ms grace; rank 0 must still be waiting.
        absl::SleepFor(absl::Milliseconds(500));
        Touch(aborted);
      }
    });
  }
  const absl::Status st = world.AllReduce(
      TensorRef(data.data(), data.size(), DataType::kFloat32), ReduceOp::kSum);
  const absl::Time returned_at = absl::Now();
  if (aborter.joinable()) aborter.join();
  if (stopped_pid > 0) kill(stopped_pid, SIGCONT);  // whatever the checks say
  printf("rank %d: all_reduce: %s\n", rank, st.ToString().c_str());
  Check(!st.ok(), "the all_reduce fails on every rank");
  if (rank == 0 && abort) {
    Require(aborted_at != absl::InfiniteFuture() && stopped_pid > 0,
            "rank 1 stopped inside its copy");
    // fad3e1b's wait and this one end for a stopped copier after an abort.
    Check(returned_at - aborted_at < Scaled(absl::Seconds(5)),
          absl::StrCat("returned ",
                       absl::FormatDuration(returned_at - aborted_at),
                       " after the abort"));
    // Rank 0's own read failed: its code stays (fad3e1b made it DATA_LOSS).
    // Rank 1 is named; another rank may be named with it (ranks 1, 2).
    const auto in_use = st.GetPayload(SingleCopyPath::kBufferStillInUsePayload);
    const std::vector<std::string> named =
        in_use ? absl::StrSplit(std::string(*in_use), ',')
               : std::vector<std::string>();
    Check(st.code() == absl::StatusCode::kUnavailable &&
              std::find(named.begin(), named.end(), "1") != named.end() &&
              absl::StrContains(st.message(), "rank 1") &&
              absl::StrContains(st.message(), "still copying") &&
              absl::StrContains(st.message(), "may still be read or written"),
          absl::StrCat("UNAVAILABLE naming rank 1 as still copying, not ",
                       st.ToString()));
    Touch(released);  // `data` stays allocated until the process ends
    std::vector<std::string> marks;
    for (int r = 1; r < size; ++r)
      marks.push_back(absl::StrCat(dir, "/done.", r));
    Require(AwaitFiles(marks, Scaled(absl::Seconds(30))),
            "every other rank's call returned");
  } else if (rank == 0) {
    if (abort_running) {
      // Rank 1 went on only after the abort, and rank 0 waited for it.
      Require(aborted_at != absl::InfiniteFuture() && aborted_at < returned_at,
              "the group was aborted while rank 0 waited for rank 1");
    }
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
