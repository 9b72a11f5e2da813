// ShardedSnapshot in a real job. Each rank commits its own shard (sizes
// differ by rank) twice; then, on groups that leave ranks out as a loss
// would: every shard of the newest commit comes back, equal to what its
// rank committed, from the rank's own copy or its left neighbour's; a rank
// asking for its own shard gets it without traffic; two neighbours lost
// together end in the same DATA_LOSS on every member, naming the shards; a
// commit nobody holds, registrations that differ and a shard index outside
// the commit's group are errors alike on every member; a commit interrupted
// on one rank before its exchange leaves the previous commit to recover, one
// interrupted before its barrier the new one (pending on the survivors); and
// the group works after every case. A member that cannot allocate what a
// commit or a fetch needs fails every member at once, and a commit refused
// so leaves what a fetch gave readable.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/elastic/host_collectives.h"
#include "cc/elastic/sharded_snapshot.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"
#include "testing/cc/time_scale.h"

namespace distkit {
namespace {

using elastic::ShardedSnapshot;
using testing::Check;
using testing::CheckOk;
using testing::RequireOk;

// Rank r's shard in its c-th commit: r + 2 values (shards differ in size),
// and a step counter.
std::vector<double> Values(int r, int c) {
  std::vector<double> v(static_cast<size_t>(r) + 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1000.0 * c + 10.0 * r + i;
  return v;
}

// A snapshot of this rank's shard, committed twice on `world`.
struct Trainer {
  std::vector<double> w;
  int64_t step = 0;
  ShardedSnapshot snapshot;

  explicit Trainer(int rank) : w(Values(rank, 0)) {
    RequireOk(snapshot.Register("w", w.data(), w.size() * sizeof(double)),
              "register w");
    RequireOk(snapshot.Register("step", &step, sizeof(step)), "register step");
  }
  void CommitTwice(ProcessGroup& world) {
    for (int c = 1; c <= 2; ++c) {
      const std::vector<double> v = Values(world.rank(), c);
      std::copy(v.begin(), v.end(), w.begin());
      step = 100 * c + world.rank();
      RequireOk(snapshot.Commit(world), absl::StrCat("commit ", c));
    }
    // Moved on since: what comes back must be the commit.
    std::fill(w.begin(), w.end(), -1.0);
    step = -1;
  }
};

// Shard j as fetched equals rank j's second commit.
void CheckShard(const ShardedSnapshot& s, int j, const std::string& where) {
  absl::StatusOr<absl::Span<const char>> w = s.Shard(j, 0);
  absl::StatusOr<absl::Span<const char>> step = s.Shard(j, 1);
  if (!w.ok() || !step.ok()) {
    Check(false, absl::StrCat(where, ": shard ", j,
                              " not readable: ", w.status().ToString(), " ",
                              step.status().ToString()));
    return;
  }
  const std::vector<double> want = Values(j, 2);
  std::vector<double> got(w->size() / sizeof(double));
  if (!w->empty()) std::memcpy(got.data(), w->data(), w->size());
  int64_t got_step = 0;
  if (step->size() == sizeof(got_step)) {
    std::memcpy(&got_step, step->data(), sizeof(got_step));
  }
  Check(got == want && got_step == 200 + j,
        absl::StrCat(where, ": shard ", j, " equals rank ", j,
                     "'s second commit (step ", got_step, ")"));
}

// Every member of a group without `lost` fetches every shard.
void Recover(ProcessGroup& world, const std::vector<int>& lost) {
  Trainer t(world.rank());
  t.CommitTwice(world);
  Check(t.snapshot.commit_number() == 2, "two commits in force");
  const int n = world.size(), me = world.rank();
  std::vector<int> members;
  for (int r = 0; r < n; ++r) {
    if (std::find(lost.begin(), lost.end(), r) == lost.end()) {
      members.push_back(r);
    }
  }
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = world.NewGroup(members);
  RequireOk(g.status(), "the survivors' group");
  const std::string where =
      absl::StrCat("lost {", absl::StrJoin(lost, ","), "} of ", n);
  if ((*g)->is_member()) {
    absl::StatusOr<ShardedSnapshot::Fetched> got =
        t.snapshot.Fetch(**g, std::nullopt);
    const bool neighbours_lost =
        lost.size() == 2 &&
        (lost[1] - lost[0] == 1 || (lost[0] == 0 && lost[1] == n - 1));
    if (neighbours_lost && n > 2) {
      const int first = lost[0] == 0 && lost[1] == n - 1 ? 0 : lost[1];
      Check(got.status().code() == absl::StatusCode::kDataLoss &&
                absl::StrContains(
                    got.status().message(),
                    absl::StrCat("shard(s) ", first, " of commit 2 are lost")),
            absl::StrCat(where, ": DATA_LOSS naming shard ", first, ": ",
                         got.status().ToString()));
    } else {
      RequireOk(got.status(), absl::StrCat(where, ": fetch"));
      Check(got->commit == 2 && got->world == n,
            absl::StrCat(where, ": commit ", got->commit, " of ", got->world,
                         " ranks"));
      for (int j = 0; j < n; ++j) CheckShard(t.snapshot, j, where);
    }
  }
  CheckOk(world.Barrier(), "the world after the case");
}

// A commit interrupted on the last rank (as if it died `where`), after one
// that completed: the others' second commit fails (on a group whose
// operations give up after 2 s (scaled under sanitizers), made before the first
// commit, whose barrier then lines the ranks up), and on a group without the
// last rank they recover the second commit where its exchange ended everywhere
// (its shards pending on the survivors), else the first.
void Interrupted(ProcessGroup& world, ShardedSnapshot::StopForTesting where,
                 int64_t want_commit) {
  const int n = world.size(), me = world.rank(), lost = n - 1;
  std::vector<int> all, members;
  for (int r = 0; r < n; ++r) {
    all.push_back(r);
    if (r != lost) members.push_back(r);
  }
  GroupOptions o;
  o.timeout = testing::Scaled(absl::Seconds(2));
  o.connect_timeout = absl::Seconds(60);
  o.name = absl::StrCat("interrupted", static_cast<int>(where));
  absl::StatusOr<std::shared_ptr<ProcessGroup>> sub = world.NewGroup(all);
  RequireOk(sub.status(), "the first commit's group");
  absl::StatusOr<std::shared_ptr<ProcessGroup>> brief = world.NewGroup(all, o);
  RequireOk(brief.status(), "the interrupted commit's group");
  std::vector<double> w = Values(me, 1);
  int64_t step = 100 + me;
  ShardedSnapshot s;
  RequireOk(s.Register("w", w.data(), w.size() * sizeof(double)), "register");
  RequireOk(s.Register("step", &step, sizeof(step)), "register");
  RequireOk(s.Commit(**sub), "the first commit");
  const std::vector<double> second = Values(me, 2);
  std::copy(second.begin(), second.end(), w.begin());
  step = 200 + me;
  if (me == lost) s.SetStopForTesting(where);
  const absl::Status interrupted = s.Commit(**brief);
  const std::string what =
      absl::StrCat("commit interrupted ",
                   where == ShardedSnapshot::StopForTesting::kBeforeExchange
                       ? "before the exchange"
                       : "before the barrier");
  Check(!interrupted.ok(), absl::StrCat(what, ": the second commit fails: ",
                                        interrupted.ToString()));
  Check(s.commit_number() == 1, what + ": the first commit stays in force");
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = world.NewGroup(members);
  RequireOk(g.status(), "the survivors' group");
  if ((*g)->is_member()) {
    absl::StatusOr<ShardedSnapshot::Fetched> got = s.Fetch(**g, std::nullopt);
    RequireOk(got.status(), what + ": fetch");
    Check(got->commit == want_commit && got->world == n,
          absl::StrCat(what, ": fetched commit ", got->commit, " of ",
                       got->world, " ranks, want ", want_commit));
    for (int j = 0; j < n; ++j) {
      absl::StatusOr<absl::Span<const char>> shard = s.Shard(j, 0);
      const std::vector<double> want = Values(j, static_cast<int>(want_commit));
      Check(shard.ok() && shard->size() == want.size() * sizeof(double) &&
                std::memcmp(shard->data(), want.data(), shard->size()) == 0,
            absl::StrCat(what, ": shard ", j, " is rank ", j, "'s commit ",
                         want_commit));
    }
    Check(s.commit_number() == want_commit,
          what + ": the fetched commit is in force");
  }
  CheckOk(world.Barrier(), "the world after the case");
}

// A member that cannot allocate what a commit or a fetch needs: every
// member fails at once (not at the op timeout, which it is far inside), the
// others naming it, nothing is committed, and the same calls succeed once
// it can. Rank r's shard is r + 1 MiB.
void AllocationFails(ProcessGroup& world) {
  const int n = world.size(), me = world.rank();
  std::vector<int> all;
  for (int r = 0; r < n; ++r) all.push_back(r);
  GroupOptions o;
  o.timeout = testing::Scaled(absl::Seconds(20));
  o.connect_timeout = absl::Seconds(60);
  o.name = "allocation";
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = world.NewGroup(all, o);
  RequireOk(g.status(), "the allocation cases' group");
  const int64_t mib = int64_t{1} << 20;
  std::vector<char> w(static_cast<size_t>((me + 1) * mib),
                      static_cast<char>(me + 1));
  ShardedSnapshot s;
  RequireOk(s.Register("w", w.data(), static_cast<int64_t>(w.size())),
            "register");
  auto fails_at_once = [&](const char* what, int victim, int64_t limit,
                           auto call) {
    if (me == victim) elastic::SetHostAllocationLimitForTesting(limit);
    const absl::Time start = absl::Now();
    const absl::Status status = call();
    const absl::Duration took = absl::Now() - start;
    elastic::SetHostAllocationLimitForTesting(-1);
    Check(status.code() == absl::StatusCode::kResourceExhausted,
          absl::StrCat(what, ": RESOURCE_EXHAUSTED, got ", status.ToString()));
    Check(
        me == victim || absl::StrContains(status.message(),
                                          absl::StrCat("member(s) ", victim)),
        absl::StrCat(what, ": names member ", victim, ": ", status.ToString()));
    Check(took < o.timeout / 4,
          absl::StrCat(what, ": fails at once, not at the op timeout (took ",
                       absl::FormatDuration(took), ")"));
  };
  auto commit = [&] { return s.Commit(**g); };
  // The last rank cannot pack its own shard; rank 0 packs its 1 MiB but
  // cannot hold rank 1's 2 MiB copy.
  fails_at_once("commit, a shard not packed", n - 1, mib / 2, commit);
  fails_at_once("commit, a neighbour's copy not held", 0, mib + mib / 2,
                commit);
  Check(s.commit_number() == 0, "nothing committed after the failures");
  CheckOk(s.Commit(**g), "the commit once memory is there");
  Check(s.commit_number() == 1, "then committed");
  // From 3 ranks a fetch of every shard moves shards (with 2 each rank
  // holds both): rank 0, the lowest holder of shards 0 and 1, cannot hold
  // what it sends; the last rank, which sends nothing (the lower holder of
  // its shard is its left neighbour), cannot hold what it receives.
  std::vector<int> every = all;
  auto fetch = [&] { return s.Fetch(**g, every).status(); };
  if (n > 2) {
    fails_at_once("fetch, what it sends", 0, mib / 2, fetch);
    fails_at_once("fetch, what it receives", n - 1, mib / 2, fetch);
  }
  absl::StatusOr<ShardedSnapshot::Fetched> got = s.Fetch(**g, every);
  CheckOk(got.status(), "the fetch once memory is there");
  for (int j = 0; j < n && got.ok(); ++j) {
    absl::StatusOr<absl::Span<const char>> shard = s.Shard(j, 0);
    Check(shard.ok() && shard->size() == static_cast<size_t>((j + 1) * mib) &&
              (*shard)[0] == static_cast<char>(j + 1) &&
              shard->back() == static_cast<char>(j + 1),
          absl::StrCat("fetched shard ", j, " is rank ", j, "'s"));
  }
  // A commit refused for a neighbour's copy changes nothing: what the fetch
  // gave stays readable, and held.
  if (n > 1 && got.ok()) {
    const int64_t held = s.bytes();
    fails_at_once("commit after a fetch, a neighbour's copy not held", 0,
                  mib + mib / 2, commit);
    Check(s.commit_number() == 1, "the refused commit left commit 1 in force");
    Check(s.bytes() == held,
          absl::StrCat("the refused commit left what was held: ", s.bytes(),
                       " bytes, ", held, " before"));
    for (int j = 0; j < n; ++j) {
      absl::StatusOr<absl::Span<const char>> shard = s.Shard(j, 0);
      Check(shard.ok() && shard->size() == static_cast<size_t>((j + 1) * mib),
            absl::StrCat("fetched shard ", j,
                         " still readable after the refused commit: ",
                         shard.status().ToString()));
    }
  }
  CheckOk(world.Barrier(), "the world after the allocation cases");
}

// Asking for its own shard alone: served from this rank's memory.
void OwnShardIsLocal(ProcessGroup& world) {
  Trainer t(world.rank());
  t.CommitTwice(world);
  const int64_t held = t.snapshot.bytes();
  absl::StatusOr<ShardedSnapshot::Fetched> got =
      t.snapshot.Fetch(world, std::vector<int>{world.rank()});
  RequireOk(got.status(), "fetch own shard");
  CheckShard(t.snapshot, world.rank(), "own shard");
  Check(t.snapshot.bytes() == held,
        absl::StrCat("nothing received: ", t.snapshot.bytes(), " bytes held, ",
                     held, " before"));
  if (world.size() > 1) {
    Check(t.snapshot.Shard((world.rank() + 1) % world.size(), 0)
                  .status()
                  .code() == absl::StatusCode::kNotFound,
          "a shard not asked for is NOT_FOUND");
  }
  Check(t.snapshot.Register("late", &t.step, 8).code() ==
            absl::StatusCode::kFailedPrecondition,
        "registering after a commit is refused");
}

// Errors every member gets alike.
void Errors(ProcessGroup& world) {
  const int me = world.rank(), n = world.size();
  {
    double x = me;
    ShardedSnapshot s;
    RequireOk(s.Register("x", &x, sizeof(x)), "register");
    absl::StatusOr<ShardedSnapshot::Fetched> got = s.Fetch(world, std::nullopt);
    Check(got.status().code() == absl::StatusCode::kFailedPrecondition &&
              absl::StrContains(got.status().message(),
                                "holds a committed snapshot"),
          absl::StrCat("nothing committed: ", got.status().ToString()));
  }
  {
    Trainer t(me);
    t.CommitTwice(world);
    absl::StatusOr<ShardedSnapshot::Fetched> got =
        t.snapshot.Fetch(world, std::vector<int>{me == 0 ? n : 0});
    Check(got.status().code() == absl::StatusCode::kInvalidArgument &&
              absl::StrContains(got.status().message(),
                                absl::StrCat("rank 0 asked for shard ", n)),
          absl::StrCat("a shard outside the group: ", got.status().ToString()));
  }
  if (n > 1) {
    double x = me;
    ShardedSnapshot s;
    RequireOk(s.Register(me == n - 1 ? "y" : "x", &x, sizeof(x)), "register");
    absl::Status got = s.Commit(world);
    Check(got.code() == absl::StatusCode::kInvalidArgument &&
              absl::StrContains(got.message(),
                                absl::StrCat("rank(s) ", n - 1, " registered")),
          absl::StrCat("registrations differ: ", got.ToString()));
  }
  if (n > 1) {
    // A member fetching with a snapshot of other buffers: the last rank's
    // committed on its own, the others' on the rest.
    std::vector<int> rest;
    for (int r = 0; r < n - 1; ++r) rest.push_back(r);
    absl::StatusOr<std::shared_ptr<ProcessGroup>> others = world.NewGroup(rest);
    absl::StatusOr<std::shared_ptr<ProcessGroup>> alone =
        world.NewGroup({n - 1});
    RequireOk(others.status(), "the others' group");
    RequireOk(alone.status(), "the last rank's group");
    double x = me;
    ShardedSnapshot s;
    RequireOk(s.Register(me == n - 1 ? "y" : "x", &x, sizeof(x)), "register");
    RequireOk(s.Commit(me == n - 1 ? **alone : **others), "commit");
    absl::StatusOr<ShardedSnapshot::Fetched> got = s.Fetch(world, std::nullopt);
    Check(got.status().code() == absl::StatusCode::kInvalidArgument &&
              absl::StrContains(
                  got.status().message(),
                  absl::StrCat("rank(s) ", n - 1, " registered other buffers")),
          absl::StrCat("fetch with other registrations: ",
                       got.status().ToString()));
  }
  if (n > 1) {
    // The old layout's snapshot committed again on the survivors of a lost
    // last rank (its buffers are the old layout's shards, which a trainer
    // replaces): refused on every survivor.
    std::vector<int> rest;
    for (int r = 0; r < n - 1; ++r) rest.push_back(r);
    absl::StatusOr<std::shared_ptr<ProcessGroup>> survivors =
        world.NewGroup(rest);
    RequireOk(survivors.status(), "the survivors' group");
    double x = me;
    ShardedSnapshot s;
    RequireOk(s.Register("x", &x, sizeof(x)), "register");
    RequireOk(s.Commit(world), "commit on the world");
    if (me < n - 1) {
      absl::Status got = s.Commit(**survivors);
      Check(got.code() == absl::StatusCode::kFailedPrecondition &&
                absl::StrContains(got.message(),
                                  "commit a new snapshot of the new layout"),
            absl::StrCat("a commit on a group of another size: ",
                         got.ToString()));
    }
  }
  CheckOk(world.Barrier(), "the world after the errors");
}

int Main() {
  absl::StatusOr<testing::RankEnv> env = testing::JoinJob(absl::Seconds(30));
  RequireOk(env.status(), "join the job");
  ProcessGroup& world = *env->world;
  testing::SetCheckRank(world.rank());
  const int n = world.size();
  Recover(world, {});  // nothing lost: every shard comes back
  for (int k = 0; k < n && n > 1; ++k) Recover(world, {k});
  if (n > 2) {
    Recover(world, {0, 1});      // neighbours: shard 1 is lost
    Recover(world, {0, n - 1});  // neighbours around the ring: shard 0
  }
  if (n > 3) Recover(world, {0, 2});  // not neighbours: recoverable
  if (n > 1) {
    Interrupted(world, ShardedSnapshot::StopForTesting::kBeforeExchange, 1);
    Interrupted(world, ShardedSnapshot::StopForTesting::kBeforeBarrier, 2);
  }
  OwnShardIsLocal(world);
  if (n > 1) AllocationFails(world);
  Errors(world);
  return testing::FinishChecks("sharded snapshot");
}

}  // namespace
}  // namespace distkit

int main() { return distkit::Main(); }
