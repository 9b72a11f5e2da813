// Ranks that disagree, on every backend that runs here (run by
// dk_multirank_test at world sizes 2-4 over shared memory, Gloo's TCP path
// and, under mpirun, the mpi backend; `cpu:gloo,cuda:nccl` and `nccl` where
// GPUs are). The last rank calls something else: a different count, dtype,
// reduction, root, operation, all_to_all split or receive. Every rank must get
// INVALID_ARGUMENT with exactly the text computed here (so every backend
// gives the same text), its data untouched, and the group must stay usable.
//
//   disagreement_multirank_test [backend]    (default gloo)

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/data_type.h"
#include "cc/group/process_group.h"
#include "cc/launch/launcher.h"
#include "cc/store/hash_store.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"

namespace distkit {
namespace {

using testing::Check;

constexpr char kAdvice[] =
    " (every rank must make the same collective calls in the same order, with "
    "the same sizes and dtypes)";

class Disagreement {
 public:
  explicit Disagreement(ProcessGroup& g)
      : g_(g), rank_(g.rank()), last_(g.size() - 1) {}

  // "rank(s) 0, 1 called <common>; rank(s) <last> called <odd>".
  std::string Calls(const std::string& common, const std::string& odd) const {
    std::vector<int> others(last_);
    std::iota(others.begin(), others.end(), 0);
    return absl::StrCat("rank(s) ", absl::StrJoin(others, ", "), " called ",
                        common, "; rank(s) ", last_, " called ", odd);
  }

  std::string Expected(const std::string& my_op, uint64_t seq,
                       const std::string& common,
                       const std::string& odd) const {
    return absl::StrCat("ranks disagree on ", my_op, " #", seq, " on group '",
                        g_.name(), "': ", Calls(common, odd), kAdvice);
  }

  void ExpectError(const std::string& what, const absl::Status& st,
                   const std::string& expected) {
    Check(st.code() == absl::StatusCode::kInvalidArgument,
          absl::StrCat(what, ": INVALID_ARGUMENT on rank ", rank_, ", got ",
                       st.ToString()));
    Check(st.message() == expected,
          absl::StrCat(what, " on rank ", rank_, ":\n  got      ", st.message(),
                       "\n  expected ", expected));
  }

  // The group still works: an all_reduce of the ranks' numbers.
  void ExpectUsable(const std::string& after) {
    std::vector<int64_t> v = {rank_ + 1, 10 * (rank_ + 1)};
    absl::Status st =
        g_.AllReduce(TensorRef(v.data(), 2, DataType::kInt64), ReduceOp::kSum);
    ++seq_;
    const int64_t n = last_ + 1, sum = n * (n + 1) / 2;
    Check(st.ok() && v[0] == sum && v[1] == 10 * sum,
          absl::StrCat("group usable after ", after, ": ", st.ToString()));
  }

  // An all_reduce of `t` with `op`, which the last rank calls differently:
  // every rank fails naming both signatures (`common`, the other ranks', and
  // `odd`, the last rank's, each after "all_reduce #<seq>").
  void ExpectAllReduceDisagreement(const std::string& what, const TensorRef& t,
                                   ReduceOp op, const std::string& common,
                                   const std::string& odd) {
    absl::Status st = g_.AllReduce(t, op);
    ++seq_;
    const std::string s = absl::StrCat("all_reduce #", seq_);
    ExpectError(what, st, Expected("all_reduce", seq_, s + common, s + odd));
  }

  void Run() {
    Check(g_.Barrier().ok(), "barrier");
    seq_ = 1;
    const bool odd = rank_ == last_;

    {  // count
      std::vector<float> v(odd ? 5 : 4, 1.5f);
      const std::vector<float> before = v;
      ExpectAllReduceDisagreement(
          "count", TensorRef(v.data(), v.size(), DataType::kFloat32),
          ReduceOp::kSum, " float32 x4 op=sum", " float32 x5 op=sum");
      Check(v == before, "count: data untouched");
      ExpectUsable("count");
    }
    {  // dtype
      std::vector<double> v(4, 2.0);
      ExpectAllReduceDisagreement(
          "dtype",
          TensorRef(v.data(), 4, odd ? DataType::kFloat64 : DataType::kInt64),
          ReduceOp::kSum, " int64 x4 op=sum", " float64 x4 op=sum");
      Check(v == std::vector<double>(4, 2.0), "dtype: data untouched");
      ExpectUsable("dtype");
    }
    {  // reduction
      std::vector<int32_t> v(3, 7);
      ExpectAllReduceDisagreement("op",
                                  TensorRef(v.data(), 3, DataType::kInt32),
                                  odd ? ReduceOp::kMax : ReduceOp::kMean,
                                  " int32 x3 op=mean", " int32 x3 op=max");
      Check(v == std::vector<int32_t>(3, 7), "op: data untouched");
      ExpectUsable("op");
    }
    {  // root
      std::vector<uint8_t> v(16, static_cast<uint8_t>(rank_));
      absl::Status st =
          g_.Broadcast(TensorRef(v.data(), 16, DataType::kUInt8), odd ? 1 : 0);
      ++seq_;
      const std::string s = absl::StrCat("broadcast #", seq_, " uint8 x16");
      ExpectError("root", st,
                  Expected("broadcast", seq_, s + " root=0", s + " root=1"));
      Check(v == std::vector<uint8_t>(16, static_cast<uint8_t>(rank_)),
            "root: data untouched");
      ExpectUsable("root");
    }
    {  // a different operation
      std::vector<float> in(2, 3.0f), out(2 * (last_ + 1), -1.0f);
      absl::Status st;
      if (odd) {
        st =
            g_.AllGather(TensorRef(in.data(), 2, DataType::kFloat32),
                         TensorRef(out.data(), out.size(), DataType::kFloat32));
      } else {
        st = g_.AllReduce(TensorRef(in.data(), 2, DataType::kFloat32),
                          ReduceOp::kSum);
      }
      ++seq_;
      const std::string r =
          absl::StrCat("all_reduce #", seq_, " float32 x2 op=sum");
      const std::string a = absl::StrCat("all_gather #", seq_, " float32 x2");
      ExpectError("operation", st,
                  Expected(odd ? "all_gather" : "all_reduce", seq_, r, a));
      Check(in == std::vector<float>(2, 3.0f) &&
                out == std::vector<float>(out.size(), -1.0f),
            "operation: data untouched");
      ExpectUsable("operation");
    }
    {  // uneven all_to_all: rank 0 sends 2 to the last rank, which expects 1
      const int n = last_ + 1;
      std::vector<int64_t> in_splits(n, 1), out_splits(n, 1);
      if (rank_ == 0) in_splits[last_] = 2;
      std::vector<float> in(n + (rank_ == 0 ? 1 : 0), 4.0f), out(n, -1.0f);
      absl::Status st =
          g_.AllToAll(TensorRef(in.data(), in.size(), DataType::kFloat32),
                      TensorRef(out.data(), out.size(), DataType::kFloat32),
                      in_splits, out_splits);
      ++seq_;
      ExpectError("all_to_all splits", st,
                  absl::StrCat("all_to_all #", seq_, " on group '", g_.name(),
                               "': rank 0 sends 2 elements to rank ", last_,
                               ", which expects 1 from it (input_splits and "
                               "output_splits must match across ranks)"));
      Check(out == std::vector<float>(n, -1.0f), "all_to_all: data untouched");
      ExpectUsable("all_to_all splits");
    }
    {  // a receive that does not match the send; then one that does
      if (rank_ == 0) {
        std::vector<float> v = {1, 2, 3, 4};
        absl::Status st =
            g_.Send(TensorRef(v.data(), 4, DataType::kFloat32), last_, 7);
        Check(st.ok(), "send " + st.ToString());
        std::vector<float> w = {5, 6, 7};
        st = g_.Send(TensorRef(w.data(), 3, DataType::kFloat32), last_, 7);
        Check(st.ok(), "second send " + st.ToString());
      } else if (odd) {
        std::vector<float> v(5, -1.0f);
        absl::Status st =
            g_.Recv(TensorRef(v.data(), 5, DataType::kFloat32), 0, 7);
        ExpectError(
            "recv", st,
            absl::StrCat(
                "recv #1 on group '", g_.name(),
                "': rank 0 sent float32 x4 with tag 7 but "
                "rank ",
                last_,
                " expected float32 x5 with tag 7; the data was received "
                "and dropped"));
        Check(v == std::vector<float>(5, -1.0f), "recv: data untouched");
        std::vector<float> w(3, -1.0f);
        st = g_.Recv(TensorRef(w.data(), 3, DataType::kFloat32), 0, 7);
        Check(st.ok() && w == std::vector<float>({5, 6, 7}),
              "the next receive gets the next message: " + st.ToString());
      }
      ExpectUsable("recv");
    }
  }

 private:
  ProcessGroup& g_;
  const int rank_;
  const int last_;
  uint64_t seq_ = 0;
};

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string backend = argc > 1 ? argv[1] : "gloo";
  std::shared_ptr<ProcessGroup> world;
  if (std::getenv("OMPI_COMM_WORLD_RANK") != nullptr &&
      std::getenv("DISTKIT_STORE") == nullptr) {
    // Under mpirun: MPI connects the ranks; the store only keeps books.
    GroupOptions options;
    options.backend = backend;
    options.timeout = absl::Seconds(60);
    absl::StatusOr<RendezvousInfo> placement =
        ParseMpiPlacement(Environment::FromProcess());
    absl::StatusOr<std::shared_ptr<ProcessGroup>> made =
        placement.ok() ? ProcessGroup::CreateWorld(
                             std::make_shared<HashStore>(), placement->rank,
                             placement->world_size, options)
                       : placement.status();
    if (!made.ok()) {
      fprintf(stderr, "%s\n", made.status().ToString().c_str());
      return 1;
    }
    world = *made;
  } else {
    absl::StatusOr<testing::RankEnv> env =
        testing::JoinJob(absl::Seconds(60), backend);
    if (!env.ok()) {
      const std::string msg = env.status().ToString();
      if (backend != "gloo" &&
          env.status().code() == absl::StatusCode::kFailedPrecondition) {
        // nccl and cpu:gloo,cuda:nccl need one GPU per rank.
        printf("SKIPPED: backend %s cannot run here: %s\n", backend.c_str(),
               msg.c_str());
        return 0;
      }
      fprintf(stderr, "%s\n", msg.c_str());
      return 1;
    }
    world = env->world;
  }
  if (world->size() < 2) {
    printf("world size 1: nothing can disagree\n");
    return 0;
  }
  testing::SetCheckRank(world->rank());
  Disagreement(*world).Run();
  return testing::FinishChecks(
      absl::StrCat("every disagreement reported alike on ", backend,
                   ", world size ", world->size()));
}
