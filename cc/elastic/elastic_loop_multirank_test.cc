// The elastic loop in C++, as the C, Rust, Go and Python ones run it:
// training that survives a lost rank with no restart and no checkpoint
// file, on dist's default group and an elastic::Snapshot. A small model (w
// and its momentum, float64) takes 16 steps; each step's gradient is the sum
// over a global batch of 12 samples shared among the ranks of the current
// group, all-reduced and divided by 12, so every world size trains on the
// same batches. The state (w, the momentum, the step) is committed before the
// first step and after every 4th. In step 7 + N the victim SIGKILLs itself
// after half-updating its momentum (as every rank does before the
// all_reduce). The survivors recover as distkit.elastic does: under
// DISTKIT_MAX_REPLACEMENTS (distrun --max-replacements 1) they grow back
// (dist::GrowDefaultGroup) while the replacement joins through InitDist;
// else, where DISTKIT_MIN_RANKS allows (distrun --min-ranks 1), they shrink
// (dist::ShrinkDefaultGroup). Every member, the replacement included (its
// state starts as NaN), then syncs the snapshot and redoes the steps since
// the commit. The final weights must equal an uninterrupted run computed
// here in one process (relative 1e-12: only the partial sums' order
// differs). The argument ("grow" or "shrink") says which recovery the
// launcher's variables must lead to. Check failures are summed over the
// final group, so under --min-ranks a wrong rank fails every rank.

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cc/dist_api/dist.h"
#include "cc/elastic/snapshot.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace {

using testing::Check;
using testing::Require;
using testing::RequireOk;

constexpr int kDim = 4;
constexpr int kGlobalBatch = 12;
constexpr int64_t kSteps = 16;
constexpr int64_t kCommitEvery = 4;
constexpr double kLr = 0.1;
constexpr double kBeta = 0.9;
constexpr int kVictim = 1;
constexpr absl::Duration kTimeout = absl::Seconds(20);
constexpr absl::Duration kSettle = absl::Seconds(2);

long EnvNumber(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtol(v, nullptr, 10) : 0;
}

double Sample(int64_t t, int i, int j) {
  return std::sin(0.37 * t + 1.3 * i + 0.7 * j);
}
double Weight(int64_t t, int i) { return 1.0 + 0.5 * std::cos(t + i); }

// The summed gradient of samples [lo, hi) of step t at w.
std::vector<double> Gradient(int64_t t, int lo, int hi,
                             const std::vector<double>& w) {
  std::vector<double> g(kDim, 0.0);
  for (int j = 0; j < kDim; ++j) {
    for (int i = lo; i < hi; ++i) {
      g[j] +=
          Weight(t, i) * (w[j] - Sample(t, i, j)) + 0.01 * w[j] * w[j] * w[j];
    }
  }
  return g;
}

std::vector<double> InitialWeights() {
  std::vector<double> w(kDim);
  for (int j = 0; j < kDim; ++j) w[j] = 0.5 - 0.25 * j;
  return w;
}

// The uninterrupted run, in one process.
std::vector<double> Reference() {
  std::vector<double> w = InitialWeights(), m(kDim, 0.0);
  for (int64_t t = 0; t < kSteps; ++t) {
    const std::vector<double> g = Gradient(t, 0, kGlobalBatch, w);
    for (int j = 0; j < kDim; ++j) {
      m[j] = kBeta * m[j] + g[j] / kGlobalBatch;
      w[j] -= kLr * m[j];
    }
  }
  return w;
}

// The survivors' new default group: grown back where the launcher replaces
// a lost rank, else shrunk (distkit.elastic's membership.py decides alike).
bool Recover() {
  if (EnvNumber("DISTKIT_MAX_REPLACEMENTS") > 0) {
    absl::StatusOr<std::shared_ptr<ProcessGroup>> grown =
        dist::GrowDefaultGroup(0, kTimeout);
    if (grown.ok()) return true;
    // No replacement in time: shrink only where the job may go on smaller.
    Require(absl::IsDeadlineExceeded(grown.status()) &&
                EnvNumber("DISTKIT_MIN_RANKS") > 0,
            absl::StrCat("grow: ", grown.status().ToString()));
  }
  RequireOk(dist::ShrinkDefaultGroup(kSettle).status(), "shrink");
  return false;
}

int Main(int argc, char** argv) {
  const bool want_grow = argc > 1 && std::string(argv[1]) == "grow";
  const bool newcomer = EnvNumber("DISTKIT_REPLACEMENT") > 0;
  RequireOk(dist::InitDist("pytorch", {.timeout = kTimeout}), "init");
  const int world_rank = dist::GetRank();
  testing::SetCheckRank(world_rank);
  const int size = dist::GetWorldSize();
  Require(size >= 2, "needs 2 ranks or more");
  Check(want_grow == (EnvNumber("DISTKIT_MAX_REPLACEMENTS") > 0),
        "the launcher replaces lost ranks in the grow variant only");
  Check(want_grow || EnvNumber("DISTKIT_MIN_RANKS") > 0,
        "the shrink variant runs under distrun --min-ranks");
  const int64_t die_at = 7 + size;
  const int64_t want_commit = 1 + die_at / kCommitEvery;
  const int64_t commit_step = (die_at / kCommitEvery) * kCommitEvery;

  std::vector<double> w = InitialWeights(), m(kDim, 0.0);
  int64_t step = 0;
  if (newcomer) {  // only the sync may give a fresh process its state
    w.assign(kDim, NAN);
    m.assign(kDim, NAN);
    step = -1;
  }
  elastic::Snapshot snapshot;
  RequireOk(snapshot.Register("w", w.data(), kDim * sizeof(double)), "w");
  RequireOk(snapshot.Register("momentum", m.data(), kDim * sizeof(double)),
            "momentum");
  RequireOk(snapshot.Register("step", &step, sizeof(step)), "step");
  int recoveries = 0, steps_run = 0;
  if (newcomer) {
    // InitDist joined the survivors' grow: the default group is the grown
    // world, on which they sync next.
    absl::StatusOr<int64_t> commit = snapshot.Sync(*dist::GetDefaultGroup());
    RequireOk(commit.status(), "the replacement's sync");
    Check(*commit == want_commit, "the replacement loads the newest commit");
    Check(step == commit_step, "the replacement's step is the commit's");
  } else {
    RequireOk(snapshot.Commit(), "the first commit");
  }
  while (step < kSteps) {
    std::shared_ptr<ProcessGroup> group = dist::GetDefaultGroup();
    const int n = group->size(), r = group->rank();
    std::vector<double> g =
        Gradient(step, r * kGlobalBatch / n, (r + 1) * kGlobalBatch / n, w);
    for (double& v : m) v *= kBeta;
    if (!newcomer && recoveries == 0 && world_rank == kVictim &&
        step == die_at) {
      std::raise(SIGKILL);
    }
    absl::Status s = group->AllReduce(
        TensorRef(g.data(), kDim, DataType::kFloat64), ReduceOp::kSum);
    if (!s.ok()) {
      Check(step == die_at, "only the step the victim died in fails");
      Check(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s),
            absl::StrCat("a lost peer or a timeout: ", s.ToString()));
      const bool grown = Recover();
      ++recoveries;
      Check(grown == want_grow, "grown under --max-replacements, else shrunk");
      Check(dist::GetWorldSize() == (grown ? size : size - 1),
            "the new group's size");
      absl::StatusOr<int64_t> commit = snapshot.Sync(*dist::GetDefaultGroup());
      RequireOk(commit.status(), "the survivors' sync");
      Check(*commit == want_commit, "the survivors load the newest commit");
      Check(step == commit_step,
            "the step is the commit's: the steps since are redone");
      continue;
    }
    for (int j = 0; j < kDim; ++j) {
      m[j] += g[j] / kGlobalBatch;
      w[j] -= kLr * m[j];
    }
    ++step;
    ++steps_run;
    if (step % kCommitEvery == 0) RequireOk(snapshot.Commit(), "commit");
  }
  Check(snapshot.commit_number() == 1 + kSteps / kCommitEvery,
        "every commit counted");
  if (newcomer) {
    Check(steps_run == kSteps - commit_step,
          "the replacement trains from the commit");
  } else {
    Check(recoveries == 1, "one recovery");
    Check(steps_run == kSteps + die_at % kCommitEvery,
          "the steps since the commit are trained twice");
  }
  const std::vector<double> want = Reference();
  for (int j = 0; j < kDim; ++j) {
    Check(std::fabs(w[j] - want[j]) <= 1e-12 * std::fabs(want[j]) + 1e-14,
          absl::StrCat("w[", j, "] = ", w[j], ", the uninterrupted run's ",
                       want[j]));
  }
  // Every rank fails when any check failed anywhere.
  double failed = testing::CheckFailures();
  RequireOk(dist::GetDefaultGroup()->AllReduce(
                TensorRef(&failed, 1, DataType::kFloat64), ReduceOp::kSum),
            "the checks' sum");
  Check(failed == 0, absl::StrCat(failed, " checks failed across the ranks"));
  const int status = testing::FinishChecks(
      newcomer    ? "C++ elastic loop: joined as a replacement"
      : want_grow ? "C++ elastic loop: recovered with a replacement"
                  : "C++ elastic loop: shrank and finished");
  dist::DestroyDist();
  return status;
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) { return distkit::Main(argc, argv); }
