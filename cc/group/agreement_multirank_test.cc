// Cross-rank agreement (agreement.h) in a real job: every rank must reach the
// same verdict, naming the lowest rank with a problem and carrying its code
// and message; a root-only verdict ignores the others; a verdict carried
// from one group to another still names the job rank it came from; values
// that differ are located alike on every rank; and a roll call through the
// store finds a rank that never came. Afterwards the group still works (no
// rank is left inside a collective). With "ext_test" the group's comm device
// is not the host, so every host buffer of the agreement must be staged.
//
//   agreement_multirank_test [gloo|ext_test]    (default gloo)

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/core/device_staging.h"
#include "cc/group/agreement.h"
#include "cc/group/agreement_roll_call.h"
#include "testing/cc/extension_device.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"

namespace distkit {
namespace {

using testing::Check;
using testing::CheckOk;
using testing::RequireOk;

// Checks that `got` is `want_rank`'s problem, as that rank wrote it.
void ExpectVerdict(const std::string& what, const absl::StatusOr<Verdict>& got,
                   absl::StatusCode code, int want_rank,
                   const std::string& message) {
  if (!got.ok()) {
    Check(false, absl::StrCat(what, ": the agreement failed: ",
                              got.status().ToString()));
    return;
  }
  Check(
      got->status.code() == code && got->status.message() == message &&
          got->job_rank == want_rank,
      absl::StrCat(what, ": got ", got->status.ToString(), " from rank ",
                   got->job_rank, ", expected ", absl::StatusCodeToString(code),
                   ": ", message, " from rank ", want_rank));
}

void ExpectAgreed(const std::string& what, const absl::StatusOr<Verdict>& got) {
  Check(got.ok() && got->ok() && got->job_rank == -1,
        absl::StrCat(
            what, ": ",
            got.ok() ? got->status.ToString() : got.status().ToString()));
}

std::string Problem(int rank) {
  return absl::StrCat("rank ", rank, "'s input is bad (",
                      std::string(rank, 'x'), ")");
}

class AgreementJob {
 public:
  explicit AgreementJob(testing::RankEnv& env)
      : env_(env),
        world_(*env.world),
        rank_(world_.rank()),
        last_(world_.size() - 1) {}

  void Verdicts() {
    ExpectAgreed(
        "every rank OK",
        AgreeOnVerdict(world_, Verdict::Mine(world_, absl::OkStatus())));
    // The last rank alone (at world size 1 that is rank 0).
    absl::Status mine =
        rank_ == last_ ? absl::NotFoundError(Problem(last_)) : absl::OkStatus();
    ExpectVerdict("the last rank's problem",
                  AgreeOnVerdict(world_, Verdict::Mine(world_, mine)),
                  absl::StatusCode::kNotFound, last_, Problem(last_));
    // Several ranks: the lowest one's, whatever the others had.
    const int lowest = last_ > 0 ? 1 : 0;
    mine = rank_ >= lowest
               ? absl::Status(rank_ == lowest ? absl::StatusCode::kUnavailable
                                              : absl::StatusCode::kInternal,
                              Problem(rank_))
               : absl::OkStatus();
    ExpectVerdict("the lowest rank with a problem",
                  AgreeOnVerdict(world_, Verdict::Mine(world_, mine)),
                  absl::StatusCode::kUnavailable, lowest, Problem(lowest));
    // An empty message still travels as a problem.
    mine = rank_ == last_ ? absl::CancelledError("") : absl::OkStatus();
    ExpectVerdict("a problem without a message",
                  AgreeOnVerdict(world_, Verdict::Mine(world_, mine)),
                  absl::StatusCode::kCancelled, last_, "");
  }

  void RootVerdicts() {
    // Only rank 0 checked anything: the others' statuses are not read.
    absl::Status mine = rank_ == 0 ? absl::InvalidArgumentError(Problem(0))
                                   : absl::InternalError("not read");
    ExpectVerdict("rank 0's problem",
                  AgreeOnRootVerdict(world_, Verdict::Mine(world_, mine)),
                  absl::StatusCode::kInvalidArgument, 0, Problem(0));
    mine = rank_ == 0 ? absl::OkStatus() : absl::InternalError("not read");
    ExpectAgreed("rank 0 OK",
                 AgreeOnRootVerdict(world_, Verdict::Mine(world_, mine)));
    // Another root.
    mine =
        rank_ == last_ ? absl::DataLossError(Problem(last_)) : absl::OkStatus();
    ExpectVerdict(
        "the last rank as root",
        AgreeOnRootVerdict(world_, Verdict::Mine(world_, mine), last_),
        absl::StatusCode::kDataLoss, last_, Problem(last_));
  }

  // Two "nodes" of two ranks (world size 4): agreeing over the replicate
  // group {r, r+2} and then the node group carries the verdict of the job's
  // last rank to every rank, as HYBRID_* sharding does.
  void CarriedAcrossGroups() {
    if (world_.size() != 4) return;
    std::shared_ptr<ProcessGroup> node, replicas;
    for (int k = 0; k < 2; ++k) {
      GroupOptions o;
      o.timeout = absl::Seconds(60);
      o.name = absl::StrCat("node", k);
      auto g = world_.NewGroup({2 * k, 2 * k + 1}, o);
      RequireOk(g.status(), "node group");
      if ((*g)->is_member()) node = *g;
      o.name = absl::StrCat("replica", k);
      g = world_.NewGroup({k, k + 2}, o);
      RequireOk(g.status(), "replicate group");
      if ((*g)->is_member()) replicas = *g;
    }
    absl::Status mine =
        rank_ == 3 ? absl::NotFoundError(Problem(3)) : absl::OkStatus();
    absl::StatusOr<Verdict> v =
        AgreeOnVerdict(*replicas, Verdict::Mine(*replicas, mine));
    if (v.ok()) v = AgreeOnVerdict(*node, *v);
    ExpectVerdict("carried over two groups", v, absl::StatusCode::kNotFound, 3,
                  Problem(3));
    if (v.ok()) {
      Check(
          v->RankIn(*node) == (rank_ >= 2 ? 1 : -1),
          absl::StrCat("rank 3 in this rank's node group: ", v->RankIn(*node)));
    }
    // Rank 0 only, broadcast over the same two groups.
    mine = rank_ == 0 ? absl::InvalidArgumentError(Problem(0))
                      : absl::InternalError("not read");
    v = AgreeOnRootVerdict(*replicas, Verdict::Mine(*replicas, mine));
    if (v.ok()) v = AgreeOnRootVerdict(*node, *v);
    ExpectVerdict("rank 0's carried over two groups", v,
                  absl::StatusCode::kInvalidArgument, 0, Problem(0));
  }

  void Values() {
    std::vector<int64_t> same = {7, 40, 8, 12};
    absl::StatusOr<std::optional<ValueMismatch>> m =
        FindValueMismatch(world_, same, 2);
    Check(m.ok() && !m->has_value(), "the same values agree");
    m = FindValueMismatch(world_, {});
    Check(m.ok() && !m->has_value(), "no values agree");
    if (last_ == 0) return;
    // The last rank has one record more.
    std::vector<int64_t> longer = same;
    if (rank_ == last_) longer.insert(longer.end(), {2, 5});
    m = FindValueMismatch(world_, longer, 2);
    Check(m.ok() && m->has_value() && (*m)->rank == last_ &&
              (*m)->record == -1 &&
              (*m)->rank0_values == std::vector<int64_t>{2} &&
              (*m)->rank_values == std::vector<int64_t>{3},
          "a different record count");
    // Record 1 differs on the last rank, record 0 on no rank; with three or
    // more ranks rank 1 differs in record 1 as well and is named first.
    std::vector<int64_t> values = same;
    if (rank_ == last_) values[3] = 13;
    if (rank_ == 1 && last_ > 1) values[2] = 9;
    m = FindValueMismatch(world_, values, 2);
    const std::vector<int64_t> theirs =
        last_ > 1 ? std::vector<int64_t>{9, 12} : std::vector<int64_t>{8, 13};
    Check(m.ok() && m->has_value() && (*m)->rank == 1 && (*m)->record == 1 &&
              (*m)->rank0_values == std::vector<int64_t>{8, 12} &&
              (*m)->rank_values == theirs,
          absl::StrCat("the first differing record, at rank ",
                       m.ok() && m->has_value() ? (*m)->rank : -1));
    Check(absl::IsInvalidArgument(FindValueMismatch(world_, same, 3).status()),
          "values that are not whole records");
  }

  void RollCalls() {
    const absl::Time stop = absl::Now() + absl::Seconds(30);
    absl::StatusOr<RollCall> call =
        TakeRollCall(*env_.store, "agreement_multirank_test/all/", rank_,
                     world_.size(), "here", stop);
    std::vector<int> everyone;
    for (int r = 0; r <= last_; ++r) everyone.push_back(r);
    Check(call.ok() && call->present == everyone && call->absent.empty(),
          absl::StrCat("every rank answers: ",
                       call.ok() ? absl::StrJoin(call->present, ",")
                                 : call.status().ToString()));
    // The last rank never comes: the others find it absent once polling
    // stops. A rank is present once its key is set, so each answers (sets
    // its key, as TakeRollCall does first) and waits for the others'
    // answers before its own short window opens: however late a rank then
    // starts its call, the window decides about the last rank only.
    if (rank_ != last_) {
      const std::string prefix = "agreement_multirank_test/late/";
      std::vector<std::string> answered;
      for (int r = 0; r < last_; ++r) {
        answered.push_back(absl::StrCat(prefix, r));
      }
      CheckOk(env_.store->Set(answered[rank_], "here"), "answer the late call");
      CheckOk(env_.store->WaitWithTimeout(answered, absl::Seconds(30)),
              "every rank but the last answered the late call");
      call = TakeRollCall(*env_.store, prefix, rank_, world_.size(), "here",
                          absl::Now() + absl::Milliseconds(300),
                          absl::Milliseconds(50));
      std::vector<int> others(everyone.begin(), everyone.end() - 1);
      Check(call.ok() && call->present == others &&
                call->absent == std::vector<int>{last_},
            absl::StrCat("the last rank is absent: ",
                         call.ok() ? absl::StrJoin(call->absent, ",")
                                   : call.status().ToString()));
    }
    CheckOk(world_.Barrier(), "barrier after the roll calls");
  }

  // Nobody was left in a collective: an all_reduce still adds up (staged
  // onto the comm device, which need not be the host).
  void ExpectUsable() {
    std::vector<int64_t> v = {rank_ + 1};
    absl::Status s = OnCommDevice(TensorRef(v.data(), 1, DataType::kInt64),
                                  world_.comm_device(), Access::kReadWrite,
                                  [&](const TensorRef& t) {
                                    return world_.AllReduce(t, ReduceOp::kSum);
                                  });
    const int64_t n = last_ + 1;
    Check(s.ok() && v[0] == n * (n + 1) / 2,
          absl::StrCat("the group is usable afterwards: ", s.ToString()));
  }

 private:
  testing::RankEnv& env_;
  ProcessGroup& world_;
  const int rank_;
  const int last_;
};

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string backend = argc > 1 ? argv[1] : "gloo";
  if (backend == "ext_test") testing::InstallXorExtensionDevice();
  absl::StatusOr<testing::RankEnv> env =
      testing::JoinJob(absl::Seconds(60), backend);
  if (!env.ok()) {
    fprintf(stderr, "%s\n", env.status().ToString().c_str());
    return 1;
  }
  testing::SetCheckRank(env->world->rank());
  AgreementJob job(*env);
  job.Verdicts();
  job.RootVerdicts();
  job.CarriedAcrossGroups();
  job.Values();
  job.RollCalls();
  job.ExpectUsable();
  return testing::FinishChecks(absl::StrCat(
      "every rank reaches the same verdict, world size ", env->world->size()));
}
