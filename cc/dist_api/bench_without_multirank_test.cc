// DISTKIT_BENCH_WITHOUT (cc/core/bench_without.h) turns off what it names and
// nothing by default. Run at world size 2 on the same-host path and over TCP,
// with the variable unset and set to every feature. What each rank checks:
//   flight_recorder  an all_reduce appears in the record the group writes
//                    when aborted (DISTKIT_TRACE_DIR), only when it is on;
//   watch_threads    the JobWatch thread (dk-job-watch) runs, and on the
//                    same-host path the heartbeat thread (dk-heartbeat), only
//                    when they are on;
//   agreement        ranks that call all_reduce with different reductions
//                    on 2 MiB (above Gloo's inline limit at 2 ranks) get
//                    INVALID_ARGUMENT, except over TCP with it off (the
//                    exchange is a step of its own there, so it is skipped);
//                    on the same-host path the exchange is the operation's
//                    first step and is never skipped.

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cc/core/bench_without.h"
#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"
#include "testing/cc/file_contents.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace {

using testing::Check;
using testing::Require;

// Whether a thread of this process is named `name`.
bool HasThread(const std::string& name) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* d = readdir(dir)) {
    if (d->d_name[0] == '.') continue;
    std::ifstream in(absl::StrCat("/proc/self/task/", d->d_name, "/comm"));
    std::string comm;
    std::getline(in, comm);
    found = found || absl::StripAsciiWhitespace(comm) == name;
  }
  closedir(dir);
  return found;
}

// Whether HasThread(name) == expected: a thread names itself once it runs,
// so presence is awaited (up to 5 s) and absence checked after 300 ms.
bool ThreadIs(const std::string& name, bool expected) {
  if (!expected) {
    absl::SleepFor(absl::Milliseconds(300));
    return !HasThread(name);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!HasThread(name)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

}  // namespace
}  // namespace distkit

int main() {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  absl::StatusOr<BenchWithout> off = BenchWithoutFromEnvironment();
  if (!off.ok()) {
    fprintf(stderr, "%s\n", off.status().ToString().c_str());
    return 1;
  }
  const char* shm_env = std::getenv("DISTKIT_SHM");
  const bool shm = shm_env == nullptr || std::string(shm_env) != "0";
  // Something for the JobWatch to watch whatever the harness's store
  // settings: the launcher, by pid (job_watch.h).
  setenv("DISTKIT_LAUNCHER_WATCH", "1", 1);
  dist::InitOptions options;
  options.timeout = absl::Seconds(60);
  absl::Status init = dist::InitDist("pytorch", options);
  if (!init.ok()) {
    fprintf(stderr, "%s\n", init.ToString().c_str());
    return 1;
  }
  ProcessGroup& g = *dist::GetDefaultGroup();
  testing::SetCheckRank(g.rank());
  Require(g.size() == 2, "world size 2");

  // Watch threads: started at init and group creation, or not at all.
  Check(ThreadIs("dk-job-watch", !off->watch_threads),
        off->watch_threads ? "no JobWatch thread" : "a JobWatch thread");
  Check(ThreadIs("dk-heartbeat", shm && !off->watch_threads),
        shm && !off->watch_threads ? "a heartbeat thread"
                                   : "no heartbeat thread");

  // Agreement: different reductions on rank 0 and rank 1, 2 MiB each.
  std::vector<float> data(512 * 1024, 1.0f);
  const absl::Status mixed =
      g.AllReduce(TensorRef(data.data(), data.size(), DataType::kFloat32),
                  g.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax);
  const bool skipped = off->agreement && !shm;
  Check(skipped ? mixed.ok() : absl::IsInvalidArgument(mixed),
        absl::StrCat(skipped ? "mismatch unchecked" : "mismatch refused",
                     " (got ", mixed.ToString(), ")"));

  // Flight recorder: what the group writes when it is aborted.
  float one = 1.0f;
  Require(
      g.AllReduce(TensorRef(&one, 1, DataType::kFloat32), ReduceOp::kSum).ok(),
      "a 4-byte all_reduce");
  Require(g.Barrier().ok(), "barrier before the abort");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/bench_without.", getpid());
  mkdir(dir.c_str(), 0700);
  setenv("DISTKIT_TRACE_DIR", dir.c_str(), 1);
  g.Abort();
  const std::string trace = testing::FileContents(
      absl::StrCat(dir, "/world.rank", g.rank(), ".trace"));
  const bool recorded = absl::StrContains(trace, "op=all_reduce state=done");
  Check(recorded == !off->flight_recorder,
        absl::StrCat(off->flight_recorder ? "nothing recorded"
                                          : "the all_reduce recorded",
                     " (trace: ", trace, ")"));
  dist::DestroyDist();
  return testing::FinishChecks(absl::StrCat(
      "DISTKIT_BENCH_WITHOUT off: ", off->flight_recorder ? "fr " : "",
      off->watch_threads ? "watch " : "", off->agreement ? "agreement " : "",
      shm ? "(shm)" : "(tcp)"));
}
