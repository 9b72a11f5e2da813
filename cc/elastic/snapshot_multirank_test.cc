// Snapshot::Sync in a real job: the members agree on the newest commit any
// of them holds and every rank loads it from the first member holding it (a
// rank holding none, as a replacement, included); registrations that differ
// end in the same INVALID_ARGUMENT on every rank, naming the buffer and the
// ranks; a group in which no one holds a snapshot is FAILED_PRECONDITION
// everywhere; a receiver that cannot allocate its copy fails every rank at
// once; and the group still works afterwards.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/elastic/host_collectives.h"
#include "cc/elastic/snapshot.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"

namespace distkit {
namespace {

using elastic::Snapshot;
using testing::Check;
using testing::CheckOk;
using testing::RequireOk;

// The values rank r commits in its c-th commit.
std::vector<double> Weights(int r, int c) {
  return {r * 10.0 + c, r * 10.0 + c + 0.5, -1.0 * c};
}

// Rank r commits (r % 3) times: rank 0 holds none (as a replacement does),
// the newest commit is the highest count, first held by the lowest such
// rank, whose values everyone must end with.
void NewestCommitWins(ProcessGroup& world) {
  const int me = world.rank(), n = world.size();
  std::vector<double> w(3);
  int64_t step = -1;
  Snapshot s;
  RequireOk(s.Register("w", w.data(), w.size() * sizeof(double)), "register");
  RequireOk(s.Register("step", &step, sizeof(step)), "register");
  for (int c = 1; c <= me % 3; ++c) {
    const std::vector<double> v = Weights(me, c);
    std::copy(v.begin(), v.end(), w.begin());  // in place: w is registered
    step = 100 * me + c;
    RequireOk(s.Commit(), "commit");
  }
  // Moved on since: Sync must load the commit, not these.
  std::fill(w.begin(), w.end(), -7.0);
  step = -7;
  int newest = 0, source = -1;
  for (int r = 0; r < n; ++r) {
    if (r % 3 > newest) newest = r % 3, source = r;
  }
  absl::StatusOr<int64_t> got = s.Sync(world);
  if (source < 0) {
    Check(got.status().code() == absl::StatusCode::kFailedPrecondition,
          absl::StrCat("nobody holds a snapshot: ", got.status().ToString()));
    return;
  }
  RequireOk(got.status(), "sync");
  Check(*got == newest,
        absl::StrCat("sync loaded commit ", *got, ", want ", newest));
  Check(s.commit_number() == newest, "the loaded commit is held");
  Check(w == Weights(source, newest), "weights from the first holder");
  Check(step == 100 * source + newest, "step from the first holder");
  Check(s.bytes() == 32, "a full copy held");
  std::fill(w.begin(), w.end(), 0.0);
  CheckOk(s.Restore(), "restore after sync");
  Check(w == Weights(source, newest), "restore loads what sync received");
}

// No rank holds a snapshot: every rank gets the same precondition error.
void NobodyHoldsOne(ProcessGroup& world) {
  double x = 1;
  Snapshot s;
  RequireOk(s.Register("x", &x, sizeof(x)), "register");
  absl::StatusOr<int64_t> got = s.Sync(world);
  Check(got.status().code() == absl::StatusCode::kFailedPrecondition &&
            absl::StrContains(got.status().message(), "holds a snapshot"),
        absl::StrCat("no snapshot anywhere: ", got.status().ToString()));
}

// Rank 0 commits; the last rank cannot allocate its copy: every rank fails
// at once with RESOURCE_EXHAUSTED, the others naming it (not the broadcast
// waiting for it until the op timeout), and a second Sync, with memory
// there, loads rank 0's commit everywhere.
void ReceiverCannotAllocate(ProcessGroup& world) {
  const int me = world.rank(), last = world.size() - 1;
  std::vector<double> w(3, me);
  Snapshot s;
  RequireOk(s.Register("w", w.data(), w.size() * sizeof(double)), "register");
  if (me == 0) {
    const std::vector<double> v = Weights(0, 1);
    std::copy(v.begin(), v.end(), w.begin());  // in place: w is registered
    RequireOk(s.Commit(), "commit");
  }
  if (me == last) elastic::SetHostAllocationLimitForTesting(8);
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> got = s.Sync(world);
  const absl::Duration took = absl::Now() - start;
  elastic::SetHostAllocationLimitForTesting(-1);
  Check(got.status().code() == absl::StatusCode::kResourceExhausted &&
            (me == last || absl::StrContains(got.status().message(),
                                             absl::StrCat("member(s) ", last))),
        absl::StrCat("a receiver without memory: ", got.status().ToString()));
  Check(took < absl::Seconds(5),
        absl::StrCat("fails at once (took ", absl::FormatDuration(took), ")"));
  got = s.Sync(world);
  CheckOk(got.status(), "sync with memory there");
  Check(got.ok() && *got == 1 && w == Weights(0, 1),
        absl::StrCat("rank 0's commit everywhere: commit ",
                     got.ok() ? *got : -1, ", w ", absl::StrJoin(w, " ")));
}

// The last rank registers differently (`how`); every rank gets `want`.
void Mismatch(ProcessGroup& world, const std::string& how,
              const std::string& want) {
  const int me = world.rank(), last = world.size() - 1;
  std::vector<double> w(4, me);
  int64_t step = me;
  Snapshot s;
  const bool odd = me == last;
  RequireOk(s.Register(odd && how == "name" ? "weights" : "w", w.data(),
                       (odd && how == "size" ? 3 : 4) * sizeof(double)),
            "register");
  if (!(odd && how == "missing")) {
    RequireOk(s.Register("step", &step, sizeof(step)), "register");
  }
  RequireOk(s.Commit(), "commit");
  absl::StatusOr<int64_t> got = s.Sync(world);
  Check(got.status().code() == absl::StatusCode::kInvalidArgument &&
            absl::StrContains(got.status().message(), want),
        absl::StrCat(how, ": want INVALID_ARGUMENT with \"", want, "\", got ",
                     got.status().ToString()));
  Check(w[0] == me && step == me, "a refused sync leaves the buffers alone");
}

int Main() {
  absl::StatusOr<testing::RankEnv> env = testing::JoinJob(absl::Seconds(30));
  RequireOk(env.status(), "join the job");
  ProcessGroup& world = *env->world;
  testing::SetCheckRank(world.rank());
  NewestCommitWins(world);
  NobodyHoldsOne(world);
  if (world.size() > 1) {
    ReceiverCannotAllocate(world);
    const std::string last = absl::StrCat(world.size() - 1);
    Mismatch(world, "size",
             "buffer 'w' is 32 bytes on rank 0 but 24 bytes on rank " + last);
    Mismatch(world, "name",
             "buffer 0 is 'w' on rank 0 but 'weights' on rank " + last);
    Mismatch(world, "missing",
             "buffer 'step' is registered on rank 0 but not on rank " + last);
  }
  CheckOk(world.Barrier(), "the group works after every case");
  return testing::FinishChecks("snapshot sync");
}

}  // namespace
}  // namespace distkit

int main() { return distkit::Main(); }
