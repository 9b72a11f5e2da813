// A rank of an NCCL job dies in the middle of the collectives the gradient
// reducer or the process group issues (issue 35), on the CUDA + NCCL
// simulator: the last rank runs in a child process with
// DKSIM_NCCL_DIE_RANK / DKSIM_NCCL_DIE_AT set, so it _exit(1)s at that NCCL
// call on the world's communicator, while the process distrun started
// waits for the survivors (so distrun does not stop the job first).
//
//   ... reducer  DDP's loop: gradients marked ready, bucket all_reduces,
//                Finalize
//   ... group    asynchronous all_reduces on the world group, waited for
//   ... late     the group's loop, but the last rank lives and stops
//                issuing after 3 iterations: the survivors' operation times
//                out (kLateTimeout), or ends at a peer's abort first; both
//                must name the late rank
//
// Every survivor must get an error naming the dead rank (and no survivor
// as missing), its host, the operation and the group within the op timeout
// (no hang, no crash), then destroy its group without hanging. NCCL says
// only ncclRemoteError; the group's roll call of the survivors names the
// rank (ProcessGroup, Backend::NamesLostPeers).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/parallel/grad_reducer.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace {

// The op timeout: the survivors must fail within it.
constexpr absl::Duration kTimeout = absl::Seconds(20);
// The op timeout of the late mode, whose survivors wait it out; they must
// fail within it and the roll call's budget (3 s, ProcessGroup).
constexpr absl::Duration kLateTimeout = absl::Seconds(5);
constexpr int kLateStopsAt = 3;
// The dying rank's NCCL call on the world's communicator, counted from 1
// (an operation is two: the signatures' all-gather and its own): past
// start-up and the reducer's first iteration.
constexpr int kDieAt = 14;

// Files the survivors leave once they have their result, so the process
// distrun started for the dying rank exits only then.
std::string MarkDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const char* job = std::getenv("DISTKIT_TOKEN");
  return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/dead_peer_nccl_sim.",
                      std::string(job != nullptr ? job : "job").substr(0, 16));
}

void AwaitSurvivors(int survivors) {
  const absl::Time give_up = absl::Now() + 2 * kTimeout + absl::Seconds(20);
  while (absl::Now() < give_up) {
    int marked = 0;
    for (int r = 0; r < survivors; ++r) {
      marked += access(absl::StrCat(MarkDir(), "/done.", r).c_str(), F_OK) == 0;
    }
    if (marked == survivors) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::vector<float> Values(int rank, int p, int64_t n, int it) {
  std::vector<float> v(n);
  for (int64_t k = 0; k < n; ++k) v[k] = rank + p + 0.001f * k + it;
  return v;
}

// Runs DDP's loop until an iteration fails; that failure.
absl::Status ReducerLoop(std::shared_ptr<ProcessGroup> world, int* iteration) {
  const Device d = world->comm_device();
  const std::vector<int64_t> sizes = {3000, 500, 2000};
  std::vector<DeviceBuffer> params, grads;
  std::vector<GradReducer::Parameter> ps;
  for (size_t p = 0; p < sizes.size(); ++p) {
    const size_t bytes = sizes[p] * sizeof(float);
    auto buf = DeviceBuffer::Allocate(d, bytes);
    testing::RequireOk(buf.status(), "allocate");
    params.push_back(*std::move(buf));
    buf = DeviceBuffer::Allocate(d, bytes);
    testing::RequireOk(buf.status(), "allocate");
    grads.push_back(*std::move(buf));
    const std::vector<float> v = Values(world->rank(), p, sizes[p], 0);
    testing::RequireOk(
        CopyBytes(params[p].data(), d, v.data(), Device::Cpu(), bytes),
        "upload");
    ps.push_back({TensorRef(params[p].data(), sizes[p], DataType::kFloat32, d),
                  absl::StrCat("layer", p)});
  }
  GradReducer::Options o;
  o.first_bucket_cap_mb = 4096.0 / (1 << 20);
  o.bucket_cap_mb = 8192.0 / (1 << 20);
  auto r = GradReducer::Create(world, ps, {}, o);
  if (!r.ok()) return r.status();
  for (*iteration = 0; *iteration < 50; ++*iteration) {
    for (int p : {2, 1, 0}) {
      const std::vector<float> g =
          Values(world->rank(), p, sizes[p], *iteration);
      testing::RequireOk(CopyBytes(grads[p].data(), d, g.data(), Device::Cpu(),
                                   g.size() * sizeof(float)),
                         "gradient");
      DK_RETURN_IF_ERROR((*r)->MarkReady(
          p, TensorRef(grads[p].data(), sizes[p], DataType::kFloat32, d)));
    }
    DK_RETURN_IF_ERROR((*r)->Finalize());
  }
  return absl::OkStatus();
}

// Asynchronous all_reduces on the group until one fails (or `stop`
// iterations passed); that failure.
absl::Status GroupLoop(std::shared_ptr<ProcessGroup> world, int* iteration,
                       int stop = 50) {
  const Device d = world->comm_device();
  auto buf = DeviceBuffer::Allocate(d, 4096 * sizeof(float));
  testing::RequireOk(buf.status(), "allocate");
  const TensorRef t(buf->data(), 4096, DataType::kFloat32, d);
  for (*iteration = 0; *iteration < stop; ++*iteration) {
    std::shared_ptr<Work> a = world->AllReduceAsync(t, ReduceOp::kSum);
    std::shared_ptr<Work> b = world->BroadcastAsync(t, 0);
    DK_RETURN_IF_ERROR(a->Wait());
    DK_RETURN_IF_ERROR(b->Wait());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "reducer" && mode != "group" && mode != "late") {
    std::fprintf(stderr, "usage: %s reducer|group|late\n", argv[0]);
    return 2;
  }
  const bool late = mode == "late";
  const int rank = std::atoi(std::getenv("RANK"));
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  const int last = size - 1;
  if (size < 2) return 0;  // nobody to survive
  mkdir(MarkDir().c_str(), 0700);
  if (rank == last && !late) {
    const pid_t child = fork();
    if (child > 0) {
      AwaitSurvivors(last);
      int status = 0;
      waitpid(child, &status, 0);
      std::printf("rank %d (pid %d) ended with status %d, as planned\n", last,
                  child, WEXITSTATUS(status));
      _exit(0);
    }
    // The simulator reads these when CUDA is first used, after this.
    setenv("DKSIM_NCCL_DIE_RANK", std::to_string(last).c_str(), 1);
    setenv("DKSIM_NCCL_DIE_AT", std::to_string(kDieAt).c_str(), 1);
  }
  testing::SetCheckRank(rank);
  dist::InitOptions options;
  options.backend = "nccl";
  options.timeout = late ? kLateTimeout : kTimeout;
  options.connect_timeout = kTimeout;  // joining is not what `late` times
  testing::RequireOk(dist::InitDist("pytorch", options), "init_dist");
  std::shared_ptr<ProcessGroup> world = dist::GetDefaultGroup();
  int iteration = -1;
  if (late && rank == last) {
    // Alive, but never issues the next operation: stays away until the
    // survivors have their result, then leaves.
    testing::RequireOk(GroupLoop(world, &iteration, kLateStopsAt),
                       "the late rank's iterations");
    AwaitSurvivors(last);
    world->Abort();
    dist::DestroyDist();
    std::printf("rank %d stayed away after %d iterations, as planned\n", last,
                iteration);
    _exit(0);
  }
  const absl::Time start = absl::Now();
  absl::Status s = mode == "reducer" ? ReducerLoop(world, &iteration)
                                     : GroupLoop(world, &iteration);
  const absl::Duration took = absl::Now() - start;
  // Only survivors get here.
  std::printf("%s loop ended at iteration %d after %s: %s\n", mode.c_str(),
              iteration, absl::FormatDuration(took).c_str(),
              s.ToString().c_str());
  testing::Require(!s.ok(), "the survivor's loop fails");
  testing::Require(
      iteration >= 1 && iteration < 50,
      absl::StrCat("the death came mid-training (iteration ", iteration, ")"));
  if (late) {
    testing::Require(iteration == kLateStopsAt,
                     absl::StrCat("the late rank's missing operation failed "
                                  "(iteration ",
                                  iteration, ")"));
    testing::Require(took < kLateTimeout + absl::Seconds(3) + absl::Seconds(5),
                     absl::StrCat("the failure came within the op timeout and "
                                  "the roll call: ",
                                  absl::FormatDuration(took)));
  } else {
    testing::Require(took < kTimeout,
                     absl::StrCat("the failure came within the op timeout: ",
                                  absl::FormatDuration(took)));
  }
  const std::string m(s.message());
  testing::Require(
      absl::StrContains(m, absl::StrCat("rank(s) ", last, " never joined it")),
      absl::StrCat("the error names the dead rank ", last,
                   " and only it: ", m));
  std::vector<int> survivors;
  for (int r = 0; r < last; ++r) survivors.push_back(r);
  testing::Require(
      absl::StrContains(
          m, absl::StrCat("rank(s) ", absl::StrJoin(survivors, ", "), " did)")),
      "the error says which ranks are there: " + m);
  testing::Require(absl::StrContains(m, "on host(s) "),
                   "the error names the dead rank's host: " + m);
  testing::Require(
      absl::StrContains(m, "all_reduce") || absl::StrContains(m, "broadcast"),
      "the error names the operation: " + m);
  testing::Require(absl::StrContains(m, world->name()),
                   "the error names the group: " + m);
  std::ofstream(absl::StrCat(MarkDir(), "/done.", rank)) << "done\n";
  const absl::Time destroy = absl::Now();
  dist::DestroyDist();
  testing::Require(absl::Now() - destroy < absl::Seconds(10),
                   "the group is destroyed without hanging");
  return testing::FinishChecks(
      late ? std::string("a late peer on NCCL")
           : absl::StrCat("a dead peer under the ", mode, " on NCCL"));
}
