// Shrink and grow of NCCL groups (issue 39, item 2), on the CUDA + NCCL
// simulator, with the backend named by the second argument ("nccl" or
// "cpu:gloo,cuda:nccl"):
//
//   shrink  (distrun --min-ranks 1) N ranks run checked all_reduces,
//           all_gathers and broadcasts on device buffers; rank 1 SIGKILLs
//           itself before step kDieAt; the survivors' step fails naming it;
//           they shrink the default group (a new communicator among them)
//           and run checked steps at N - 1 on their own devices.
//   grow    (distrun --max-replacements 1) the same, then the survivors grow
//           while distrun's new process for rank 1 (DISTKIT_REPLACEMENT=1)
//           joins through dist::InitDist, on cuda:<LOCAL_RANK>: everyone
//           holds a world of N in the original order and runs checked steps.
//
// Every expected value is computed here from the members each phase must
// have. Each phase is bounded by the group's timeout (no hang), and each
// process creates CUDA contexts only on its own device: its own
// dksimContextMask at the end, and for every process of the job (the one
// killed included) the simulator's DKSIM_CONTEXT_LOG, checked by rank 0.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/core/device_copy.h"
#include "cc/dist_api/dist.h"
#include "cc/group/grow.h"
#include "cc/group/process_group.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/sim_symbol.h"

namespace distkit {
namespace {

using testing::Check;
using testing::CheckOk;
using testing::Require;
using testing::RequireOk;
using testing::SimSymbol;

constexpr int kVictim = 1;
constexpr int kDieAt = 3;
constexpr int kShrunkSteps = 3;
constexpr int kGrownSteps = 3;
constexpr int64_t kLen = 1031;
// The groups' op timeout, and the grow's.
constexpr absl::Duration kTimeout = absl::Seconds(15);
// How long survivors wait for each other in the shrink: the dead rank never
// comes, so every shrink takes it.
constexpr absl::Duration kSettle = absl::Seconds(2);
// What a phase may take past its bound: the roll call after NCCL's error
// (ProcessGroup), store round trips.
constexpr absl::Duration kMargin = absl::Seconds(5);

int world_rank = -1;
int local_rank = -1;
std::string backend;

// World rank r's element i at `step`: exact in float32 when summed.
float Value(int step, int r, int64_t i) {
  return (step + 1) * 1000.0f + (r + 1) * static_cast<float>(i % 509 + 1);
}

// A file every process of this job shares (TEST_TMPDIR is the test's; the
// token tells jobs apart).
std::string JobFile(absl::string_view what) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const char* job = std::getenv("DISTKIT_TOKEN");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/elastic_nccl_sim.",
                      std::string(job != nullptr ? job : "job").substr(0, 16),
                      ".", what);
}

// One line, appended in one write: lines of several processes never mix.
void AppendLine(const std::string& path, const std::string& line) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  Require(fd >= 0, "open " + path);
  const std::string text = line + "\n";
  Require(
      write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()),
      "write " + path);
  close(fd);
}

// A buffer on `d` holding `values`; Read() copies it back.
template <typename T>
class DeviceValues {
 public:
  DeviceValues(Device d, const std::vector<T>& values)
      : device_(d), n_(values.size()) {
    auto buf = DeviceBuffer::Allocate(d, n_ * sizeof(T));
    RequireOk(buf.status(), "cudaMalloc");
    buf_ = *std::move(buf);
    RequireOk(
        CopyBytes(buf_.data(), d, values.data(), Device::Cpu(), n_ * sizeof(T)),
        "copy to the device");
  }
  TensorRef ref(DataType dt) const {
    return TensorRef(buf_.data(), n_, dt, device_);
  }
  std::vector<T> Read() const {
    std::vector<T> out(n_);
    RequireOk(CopyBytes(out.data(), Device::Cpu(), buf_.data(), device_,
                        n_ * sizeof(T)),
              "copy from the device");
    return out;
  }

 private:
  Device device_;
  size_t n_;
  DeviceBuffer buf_;
};

// One step on `g`, whose members are the world ranks `members`: an
// all_reduce (sum) of this rank's values on its device, checked. Returns
// the all_reduce's status; the data is checked only when it is OK.
absl::Status Step(ProcessGroup& g, int step, const std::vector<int>& members) {
  std::vector<float> mine(kLen);
  for (int64_t i = 0; i < kLen; ++i) mine[i] = Value(step, world_rank, i);
  DeviceValues<float> t(g.comm_device(), mine);
  absl::Status s = g.AllReduce(t.ref(DataType::kFloat32), ReduceOp::kSum);
  if (!s.ok()) return s;
  const std::vector<float> got = t.Read();
  int wrong = 0;
  for (int64_t i = 0; i < kLen; ++i) {
    float want = 0;
    for (int r : members) want += Value(step, r, i);
    if (got[i] != want && wrong++ == 0) {
      Check(false, absl::StrCat("step ", step, " on '", g.name(), "' [", i,
                                "] = ", got[i], ", want ", want, " (members ",
                                absl::StrJoin(members, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

// The group's members, in group order, are the world ranks `members` (an
// all_gather of world ranks on the device), and a broadcast from the last
// member reaches everyone.
void CheckMembers(ProcessGroup& g, const std::vector<int>& members) {
  const int n = static_cast<int>(members.size());
  Require(g.size() == n,
          absl::StrCat("'", g.name(), "' has ", g.size(), " ranks, want ", n));
  DeviceValues<int32_t> in(g.comm_device(), {world_rank});
  DeviceValues<int32_t> all(g.comm_device(), std::vector<int32_t>(n, -1));
  RequireOk(g.AllGather(in.ref(DataType::kInt32), all.ref(DataType::kInt32)),
            "all_gather of world ranks");
  const std::vector<int32_t> order = all.Read();
  Check(std::vector<int>(order.begin(), order.end()) == members,
        absl::StrCat("'", g.name(), "' holds world ranks ",
                     absl::StrJoin(order, ", "), " in that order, want ",
                     absl::StrJoin(members, ", ")));
  std::vector<double> mine(kLen);
  for (int64_t i = 0; i < kLen; ++i) mine[i] = world_rank * 1e4 + i;
  DeviceValues<double> b(g.comm_device(), mine);
  RequireOk(g.Broadcast(b.ref(DataType::kFloat64), n - 1),
            "broadcast from the last member");
  const std::vector<double> got = b.Read();
  for (int64_t i = 0; i < kLen; ++i) {
    if (got[i] != members.back() * 1e4 + i) {
      Check(false, absl::StrCat("broadcast [", i, "] = ", got[i]));
      break;
    }
  }
  if (backend != "nccl") {
    // The dispatcher's host half (Gloo) was rebuilt too.
    std::vector<double> host = {1.0 * world_rank};
    RequireOk(g.AllReduce(
                  TensorRef(host.data(), 1, DataType::kFloat64, Device::Cpu()),
                  ReduceOp::kSum),
              "all_reduce of host memory");
    double want = 0;
    for (int r : members) want += r;
    Check(host[0] == want, "the host all_reduce sums the world ranks");
  }
}

// Runs `k` checked steps from *step on, each of which must succeed.
void Steps(ProcessGroup& g, int* step, int k, const std::vector<int>& members) {
  for (int end = *step + k; *step < end; ++*step) {
    RequireOk(Step(g, *step, members), absl::StrCat("step ", *step));
  }
}

// Every process of the job created contexts only on its own device.
void CheckContextLog() {
  std::map<long, int> device_of;  // pid -> its local rank
  std::ifstream pids(JobFile("pids"));
  long pid;
  int device;
  while (pids >> pid >> device) device_of[pid] = device;
  std::ifstream log(JobFile("contexts"));
  std::set<long> seen;
  int lines = 0;
  while (log >> pid >> device) {
    ++lines;
    seen.insert(pid);
    auto it = device_of.find(pid);
    Check(it != device_of.end(),
          absl::StrCat("process ", pid, " in the context log is the job's"));
    if (it != device_of.end()) {
      Check(device == it->second,
            absl::StrCat("process ", pid, " (local rank ", it->second,
                         ") created a context on device ", device));
    }
  }
  Check(seen.size() == device_of.size(),
        absl::StrCat(seen.size(), " of ", device_of.size(),
                     " processes logged contexts (", lines, " lines)"));
  std::printf("rank %d: context log: %d contexts of %zu processes\n",
              world_rank, lines, seen.size());
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  backend = argc > 2 ? argv[2] : "";
  if ((mode != "shrink" && mode != "grow") ||
      (backend != "nccl" && backend != "cpu:gloo,cuda:nccl")) {
    std::fprintf(stderr, "usage: %s shrink|grow nccl|cpu:gloo,cuda:nccl\n",
                 argv[0]);
    return 2;
  }
  world_rank = std::atoi(std::getenv("RANK"));
  local_rank = std::atoi(std::getenv("LOCAL_RANK"));
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  const char* replacement = std::getenv("DISTKIT_REPLACEMENT");
  const bool newcomer = replacement != nullptr && *replacement != '\0';
  testing::SetCheckRank(world_rank);
  Require(size >= 2, "needs 2 ranks or more");
  // The simulator reads it when CUDA is first used, after this.
  setenv("DKSIM_CONTEXT_LOG", JobFile("contexts").c_str(), 1);
  AppendLine(JobFile("pids"), absl::StrCat(getpid(), " ", local_rank));
  std::vector<int> all, survivors;
  for (int r = 0; r < size; ++r) {
    all.push_back(r);
    if (r != kVictim) survivors.push_back(r);
  }

  dist::InitOptions options;
  options.backend = backend;
  options.timeout = kTimeout;
  RequireOk(dist::InitDist("pytorch", options), "init_dist");
  std::shared_ptr<ProcessGroup> world = dist::GetDefaultGroup();
  const Device mine = Device::Cuda(local_rank);
  Require(
      world->comm_device() == mine,
      absl::StrCat("the world computes on ", world->comm_device().ToString(),
                   ", want ", mine.ToString()));
  int step = 0;
  std::shared_ptr<ProcessGroup> grown;
  if (newcomer) {
    // InitDist joined the survivors' grow: its world is the grown group.
    Check(std::string(replacement) == "1", "the job's first replacement");
    Check(world_rank == kVictim, "the replacement takes the lost rank");
    Check(absl::StartsWith(world->name(), "world@g1"),
          "the replacement's world is generation 1: " + world->name());
    Check(world->backend_name() == backend, "the replacement's backend");
    std::printf("rank %d: replacement %s joined '%s' on %s\n", world_rank,
                replacement, world->name().c_str(),
                world->comm_device().ToString().c_str());
    grown = world;
  } else {
    CheckMembers(*world, all);
    Steps(*world, &step, kDieAt, all);
    if (world_rank == kVictim) {
      std::printf("rank %d: SIGKILL before step %d\n", world_rank, step);
      raise(SIGKILL);
    }
    absl::Time start = absl::Now();
    absl::Status failed = Step(*world, step, all);
    const absl::Duration detect = absl::Now() - start;
    std::printf("rank %d: step %d failed after %s: %s\n", world_rank, step,
                absl::FormatDuration(detect).c_str(),
                failed.ToString().c_str());
    Require(!failed.ok(), "the step the rank died in fails");
    Check(detect < kTimeout + kMargin,
          "the failure came within the op timeout and the roll call");
    const std::string m(failed.message());
    Check(absl::StrContains(
              m, absl::StrCat("rank(s) ", kVictim, " never joined it")),
          "the error names the dead rank: " + m);

    start = absl::Now();
    absl::StatusOr<std::shared_ptr<ProcessGroup>> shrunk =
        dist::ShrinkDefaultGroup(kSettle);
    const absl::Duration shrink_took = absl::Now() - start;
    RequireOk(shrunk.status(), "shrink");
    std::printf("rank %d: shrank to '%s' (%d ranks) in %s\n", world_rank,
                (*shrunk)->name().c_str(), (*shrunk)->size(),
                absl::FormatDuration(shrink_took).c_str());
    Check(shrink_took < kSettle + kTimeout, "the shrink is bounded");
    Check((*shrunk)->backend_name() == backend, "the shrunk group's backend");
    Check((*shrunk)->comm_device() == mine,
          "the shrunk group computes on this rank's device");
    Check(!world->AsyncError().ok(), "the old world is aborted");
    CheckMembers(**shrunk, survivors);
    Steps(**shrunk, &step, kShrunkSteps, survivors);
    if (mode == "shrink") {
      RequireOk((*shrunk)->Barrier(), "the survivors' last barrier");
      if (world_rank == 0) CheckContextLog();
      world.reset();
      shrunk->reset();
      start = absl::Now();
      dist::DestroyDist();
      Check(absl::Now() - start < kTimeout, "destroy is bounded");
      auto mask =
          reinterpret_cast<unsigned (*)()>(SimSymbol("dksimContextMask"));
      Check(mask() == 1u << local_rank,
            absl::StrCat("contexts only on device ", local_rank, ": mask ",
                         mask()));
      return testing::FinishChecks(absl::StrCat("shrank on ", backend, " to ",
                                                survivors.size(), " ranks"));
    }
    start = absl::Now();
    absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
        dist::GrowDefaultGroup(0, kTimeout);
    const absl::Duration grow_took = absl::Now() - start;
    RequireOk(g.status(), "grow");
    std::printf("rank %d: grew to '%s' in %s\n", world_rank,
                (*g)->name().c_str(), absl::FormatDuration(grow_took).c_str());
    Check(grow_took < kTimeout + kMargin, "the grow is bounded");
    grown = *std::move(g);
    Check(!(*shrunk)->AsyncError().ok(), "the shrunk group is aborted");
  }
  // Both sides: back at the job's size, in the original order.
  Check(grown->rank() == world_rank, "world ranks kept");
  Check(absl::StartsWith(grown->name(), "world@g1"),
        "the grown group carries generation 1: " + grown->name());
  Check(grown->backend_name() == backend, "the grown group's backend");
  Check(grown->comm_device() == mine,
        "the grown group computes on this rank's device");
  CheckMembers(*grown, all);
  DeviceValues<int64_t> counter(mine, {step});
  RequireOk(grown->Broadcast(counter.ref(DataType::kInt64), 0),
            "broadcast of the step");
  step = static_cast<int>(counter.Read()[0]);
  Check(step == kDieAt + kShrunkSteps, "the step counter from rank 0");
  Steps(*grown, &step, kGrownSteps, all);
  RequireOk(grown->Barrier(), "the last barrier");
  if (world_rank == 0) CheckContextLog();
  world.reset();
  grown.reset();
  const absl::Time start = absl::Now();
  dist::DestroyDist();
  Check(absl::Now() - start < kTimeout, "destroy is bounded");
  auto mask = reinterpret_cast<unsigned (*)()>(SimSymbol("dksimContextMask"));
  Check(
      mask() == 1u << local_rank,
      absl::StrCat("contexts only on device ", local_rank, ": mask ", mask()));
  return testing::FinishChecks(
      absl::StrCat(newcomer ? "joined as a replacement" : "shrank and grew",
                   " on ", backend, ", back at ", size, " ranks"));
}
