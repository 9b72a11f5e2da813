// Eager steps (eager_exchange.h) on the same-host path, run by
// dk_multirank_test at world sizes 2-4. Each case makes a group of its own
// (a fresh segment: the mismatch cases fail theirs). Modes (argv[1]):
//   ahead  a sender runs kEagerDepth - 1 (63) operations ahead of its
//          receivers: rank 0 broadcasts and scatters 63 times, and the
//          non-roots gather and reduce to rank 0 63 times, before their peers
//          even call (they wait for the senders' store marks), then 30 more;
//          every value is checked. With a barrier per operation the first
//          call waits for peers that wait for its mark: DEADLINE_EXCEEDED
//          (DISTKIT_SHM_EAGER=0 shows it).
//   differ calls that differ where a sender does not wait: a receiver that
//          sees it at once (ABORTED naming both calls; the sender's next
//          call names the receiver), two senders whose calls differ (seen
//          by every rank at the next operation through the chains), and an
//          eager call against a synchronized one (a 4 KiB broadcast).
//   dead   the non-roots exit (without a word) after a barrier: rank 0's
//          broadcasts succeed exactly kEagerDepth - 1 (63) times, then fail
//          naming an exited rank within the group's bounds, not a hang.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cc/comm/shm/shm_segment.h"
#include "cc/core/data_type.h"
#include "cc/group/process_group.h"
#include "cc/store/prefix_store.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"
#include "testing/cc/store_marks.h"
#include "testing/cc/time_scale.h"

namespace distkit {
namespace {

using testing::Check;
using testing::CheckOk;
using testing::Require;
using testing::RequireOk;

constexpr int kAhead = kEagerDepth - 1;
constexpr int kCalls = 30;

struct Job {
  std::shared_ptr<Store> store;
  int rank;
  int size;
};

// A fresh group (its own segment) for one case.
std::shared_ptr<ProcessGroup> MakeGroup(const Job& job, const std::string& name,
                                        absl::Duration timeout) {
  GroupOptions options;
  options.name = name;
  options.timeout = timeout;
  auto store = std::make_shared<PrefixStore>("eager/" + name, job.store);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
      ProcessGroup::CreateWorld(store, job.rank, job.size, options);
  RequireOk(g.status(), "group " + name);
  // Every rank is through the group's creation before any calls: a rank
  // that fails the group over calls that differ would otherwise fail a
  // peer's creation still in its last wait (UNAVAILABLE naming it there).
  testing::MarkAndAwaitAll(*job.store, "eager_made/" + name, job.rank, job.size,
                           absl::Seconds(60));
  return *g;
}

// The value element k of call i carries from rank r.
float Value(int i, int r, int k) { return 1000.0f * i + 10.0f * r + k + 0.5f; }

// Waits for the marks of `ranks` under `name`.
void AwaitMarks(Store& store, const std::string& name,
                const std::vector<int>& ranks) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(absl::StrCat(name, "/", r));
  RequireOk(store.WaitWithTimeout(keys, absl::Seconds(60)), "marks " + name);
}

void Ahead(const Job& job) {
  const int rank = job.rank, n = job.size;
  std::shared_ptr<ProcessGroup> g = MakeGroup(job, "ahead", absl::Seconds(10));
  auto marks = std::make_shared<PrefixStore>("eager_ahead_marks", job.store);
  std::vector<int> non_roots;
  for (int r = 1; r < n; ++r) non_roots.push_back(r);

  // Broadcast and scatter from rank 0, which calls first.
  auto broadcast = [&](int i) {
    std::vector<float> v(4, -1.0f);
    if (rank == 0) {
      for (int k = 0; k < 4; ++k) v[k] = Value(i, 0, k);
    }
    absl::Status st = g->Broadcast(TensorRef(v.data(), 4, DataType::kFloat32),
                                   /*root=*/0);
    bool right = st.ok();
    for (int k = 0; k < 4; ++k) right = right && v[k] == Value(i, 0, k);
    Check(right, absl::StrCat("broadcast ", i, ": ", st.ToString()));
  };
  auto scatter = [&](int i) {
    std::vector<int32_t> in(2 * n), out(2, -1);
    for (int p = 0; p < 2 * n; ++p) in[p] = 100 * i + p;
    absl::Status st =
        g->Scatter(TensorRef(in.data(), 2 * n, DataType::kInt32),
                   TensorRef(out.data(), 2, DataType::kInt32), /*root=*/0);
    Check(st.ok() && out[0] == 100 * i + 2 * rank &&
              out[1] == 100 * i + 2 * rank + 1,
          absl::StrCat("scatter ", i, ": ", st.ToString()));
  };
  // Call i: a broadcast when even, a scatter when odd; the first kAhead
  // before the receivers call at all.
  auto rooted = [&](int i) { return i % 2 == 0 ? broadcast(i) : scatter(i); };
  if (rank != 0) AwaitMarks(*marks, "rooted", {0});
  for (int i = 0; i < kAhead; ++i) rooted(i);
  if (rank == 0) RequireOk(marks->Set("rooted/0", "1"), "mark");
  for (int i = kAhead; i < kAhead + kCalls; ++i) rooted(i);

  // Gather and reduce to rank 0, whose peers call first.
  auto gather = [&](int i) {
    std::vector<float> in(2), out(2 * n, -1.0f);
    for (int k = 0; k < 2; ++k) in[k] = Value(i, rank, k);
    absl::Status st =
        g->Gather(TensorRef(in.data(), 2, DataType::kFloat32),
                  TensorRef(out.data(), 2 * n, DataType::kFloat32), 0);
    bool right = st.ok();
    for (int r = 0; rank == 0 && r < n; ++r) {
      for (int k = 0; k < 2; ++k)
        right = right && out[2 * r + k] == Value(i, r, k);
    }
    Check(right, absl::StrCat("gather ", i, ": ", st.ToString()));
  };
  auto reduce = [&](int i) {
    std::vector<int64_t> v = {int64_t{i} * (rank + 1), rank - i};
    absl::Status st =
        g->Reduce(TensorRef(v.data(), 2, DataType::kInt64), ReduceOp::kSum, 0);
    const int64_t ranks_sum = int64_t{n} * (n - 1) / 2;
    Check(st.ok() && (rank != 0 || (v[0] == int64_t{i} * (ranks_sum + n) &&
                                    v[1] == ranks_sum - int64_t{n} * i)),
          absl::StrCat("reduce ", i, ": ", st.ToString()));
  };
  // Call i: a gather when even, a reduce when odd.
  auto to_root = [&](int i) { return i % 2 == 0 ? gather(i) : reduce(i); };
  if (rank == 0) AwaitMarks(*marks, "to_root", non_roots);
  for (int i = 0; i < kAhead; ++i) to_root(i);
  if (rank != 0) {
    RequireOk(marks->Set(absl::StrCat("to_root/", rank), "1"), "mark");
  }
  for (int i = kAhead; i < kAhead + kCalls; ++i) to_root(i);
  CheckOk(g->Barrier(), "barrier after the eager calls");
}

// Every rank is through case `name` (no rank exits, and so is named as
// exited, while a peer still waits for the error it expects).
void Done(const Job& job, const std::string& name) {
  testing::MarkAndAwaitAll(*job.store, "eager_done/" + name, job.rank, job.size,
                           absl::Seconds(60));
}

// The next call on a group that calls which differed failed: ABORTED
// (poisoned) on the rank that saw it, an error naming it on the others.
void ExpectFailedNext(ProcessGroup& g, const std::string& what, int seen_by,
                      int rank) {
  std::vector<int32_t> v = {1};
  absl::Status st =
      g.AllReduce(TensorRef(v.data(), 1, DataType::kInt32), ReduceOp::kSum);
  if (rank == seen_by) {
    Check(st.code() == absl::StatusCode::kFailedPrecondition &&
              absl::StrContains(st.message(), "unusable after an earlier"),
          absl::StrCat(what, ": the next call refused here: ", st.ToString()));
  } else {
    Check(st.code() == absl::StatusCode::kUnavailable &&
              absl::StrContains(st.message(),
                                absl::StrCat("rank ", seen_by,
                                             " failed inside the operation")),
          absl::StrCat(what, ": the next call names rank ", seen_by, ": ",
                       st.ToString()));
  }
}

void Differ(const Job& job) {
  const int rank = job.rank, last = job.size - 1;
  const bool odd = rank == last;
  {  // a receiver sees it: the last rank asks for 2 elements, rank 0 sends 4
    std::shared_ptr<ProcessGroup> g =
        MakeGroup(job, "receiver", absl::Seconds(10));
    std::vector<float> v(odd ? 2 : 4, -1.0f);
    if (rank == 0) v = {1, 2, 3, 4};
    absl::Status st = g->Broadcast(
        TensorRef(v.data(), v.size(), DataType::kFloat32), /*root=*/0);
    if (odd) {
      Check(
          st.code() == absl::StatusCode::kAborted &&
              absl::StrContains(st.message(), "ranks disagree: rank ") &&
              absl::StrContains(st.message(), " float32 x2 root=0; rank 0 ") &&
              absl::StrContains(st.message(), " float32 x4 root=0") &&
              absl::StrContains(st.message(), "abort it and create a new"),
          "receiver: ABORTED naming both calls: " + st.ToString());
      Check(v == std::vector<float>(2, -1.0f), "receiver: data untouched");
    } else {
      Check(st.ok() && v == std::vector<float>({1, 2, 3, 4}),
            "receiver: the others' broadcast: " + st.ToString());
    }
    ExpectFailedNext(*g, "receiver", last, rank);
    Done(job, "receiver");
  }
  {  // two senders: the last rank broadcasts from itself, the rest from 0
    std::shared_ptr<ProcessGroup> g =
        MakeGroup(job, "senders", absl::Seconds(10));
    std::vector<float> v(4, static_cast<float>(rank));
    absl::Status st = g->Broadcast(TensorRef(v.data(), 4, DataType::kFloat32),
                                   odd ? last : 0);
    // Nobody heard from a rank whose call differed: every call returns.
    Check(st.ok() && v == std::vector<float>(4, odd ? last : 0),
          "senders: every call returns: " + st.ToString());
    std::vector<int32_t> w = {1};
    st = g->AllReduce(TensorRef(w.data(), 1, DataType::kInt32), ReduceOp::kSum);
    Check(st.code() == absl::StatusCode::kAborted &&
              absl::StrContains(st.message(),
                                "earlier small rooted operations") &&
              absl::StrContains(st.message(), "all_reduce #") && w[0] == 1,
          "senders: the next operation fails on every rank: " + st.ToString());
    st = g->Barrier();
    Check(st.code() == absl::StatusCode::kFailedPrecondition,
          "senders: the group stays failed: " + st.ToString());
    Done(job, "senders");
  }
  {  // an eager call against a synchronized one: 16 B and 4 KiB
    std::shared_ptr<ProcessGroup> g =
        MakeGroup(job, "eager_sync", absl::Seconds(10));
    std::vector<float> v(odd ? 1024 : 4, -1.0f);
    if (rank == 0) v = {5, 6, 7, 8};
    absl::Status st = g->Broadcast(
        TensorRef(v.data(), v.size(), DataType::kFloat32), /*root=*/0);
    if (odd) {
      Check(st.code() == absl::StatusCode::kAborted &&
                absl::StrContains(st.message(), " float32 x4 root=0; rank ") &&
                absl::StrContains(st.message(), " float32 x1024 root=0"),
            "eager_sync: ABORTED naming both calls: " + st.ToString());
    } else {
      Check(st.ok() && v == std::vector<float>({5, 6, 7, 8}),
            "eager_sync: the eager ones return: " + st.ToString());
    }
    ExpectFailedNext(*g, "eager_sync", last, rank);
    Done(job, "eager_sync");
  }
}

void Dead(const Job& job) {
  std::shared_ptr<ProcessGroup> g = MakeGroup(job, "dead", absl::Seconds(20));
  RequireOk(g->Barrier(), "barrier");
  if (job.rank != 0) std::_Exit(0);  // without a word: no destructor runs
  int succeeded = 0;
  absl::Status st;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kEagerDepth + 8 && st.ok(); ++i) {
    std::vector<float> v = {Value(i, 0, 0)};
    st = g->Broadcast(TensorRef(v.data(), 1, DataType::kFloat32), 0);
    if (st.ok()) ++succeeded;
  }
  Check(succeeded == kAhead,
        absl::StrCat("dead: ", kAhead, " broadcasts ahead, then an error (",
                     succeeded, " succeeded)"));
  Check(st.code() == absl::StatusCode::kUnavailable &&
            absl::StrContains(st.message(), "exited"),
        "dead: the error names an exited rank: " + st.ToString());
  // The liveness look, not the 20 s timeout.
  Check(absl::Now() - start < testing::Scaled(absl::Seconds(5)),
        absl::StrCat("dead: within the liveness bound: ",
                     absl::FormatDuration(absl::Now() - start)));
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  Require(mode == "ahead" || mode == "differ" || mode == "dead",
          "mode is ahead, differ or dead");
  absl::StatusOr<testing::RankEnv> env = testing::ConnectJob();
  RequireOk(env.status(), "connect");
  Job job{env->store, env->info.rank, env->info.world_size};
  testing::SetCheckRank(job.rank);
  if (job.size < 2) {
    printf("world size 1: no shared-memory group\n");
    return 0;
  }
  if (mode == "ahead") Ahead(job);
  if (mode == "differ") Differ(job);
  if (mode == "dead") Dead(job);
  return testing::FinishChecks(
      absl::StrCat("eager steps (", mode, "), world size ", job.size));
}
