// Every operation of the mpi backend, for every dtype it takes, in every rank
// of a job started by mpirun (init_dist('mpi', backend='mpi'): no
// MASTER_ADDR; rank 0's store found through MPI, and shared: checked).
// Each rank checks each result against values it computes itself.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/comm/mpi/mpi_library.h"
#include "cc/comm/mpi/mpi_runtime.h"
#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/typed_values.h"

namespace distkit {
namespace {

int rank_ = 0, size_ = 1;

// Values as doubles; stored in the tensor's dtype.
double V(int r, int64_t i) { return (r + 1) * (i % 7 + 1); }
double Small(int r, int64_t i) { return 1 + (r + i) % 2; }

struct Buffer {
  DataType dtype;
  std::vector<uint64_t> storage;
  int64_t n;
  Buffer(DataType d, int64_t n) : dtype(d), storage(n + 1), n(n) {}
  TensorRef ref() { return TensorRef(storage.data(), n, dtype); }
  void Set(int64_t i, double v) {
    testing::SetElement(storage.data(), dtype, i, v);
  }
  double Get(int64_t i) const {
    return testing::GetElement(storage.data(), dtype, i);
  }
};

bool IsInt(DataType d) {
  return d == DataType::kInt8 || d == DataType::kUInt8 ||
         d == DataType::kInt32 || d == DataType::kInt64;
}

void Near(double got, double want, const std::string& what) {
  testing::Require(std::abs(got - want) <= 1e-2 * std::max(1.0, std::abs(want)),
                   absl::StrCat(what, ": got ", got, ", want ", want));
}

void AllOps(ProcessGroup& g, DataType d) {
  const std::string name(DataTypeName(d));
  const int n = g.size(), r = g.rank();
  const int64_t len = 37;
  if (d == DataType::kBool) {
    for (ReduceOp op :
         {ReduceOp::kBor, ReduceOp::kBand, ReduceOp::kMax, ReduceOp::kMin}) {
      Buffer b(d, len);
      for (int64_t i = 0; i < len; ++i) b.Set(i, (r + i) % 2);
      testing::RequireOk(g.AllReduce(b.ref(), op), "bool all_reduce");
      for (int64_t i = 0; i < len; ++i) {
        bool any = false, all = true;
        for (int q = 0; q < n; ++q) {
          any |= (q + i) % 2;
          all &= (q + i) % 2 != 0;
        }
        const bool want =
            op == ReduceOp::kBor || op == ReduceOp::kMax ? any : all;
        testing::Require(b.Get(i) == want, "bool " + name);
      }
    }
  } else {
    struct Case {
      ReduceOp op;
      bool small;
    };
    for (Case c : {Case{ReduceOp::kSum, false}, Case{ReduceOp::kMax, false},
                   Case{ReduceOp::kMin, false}, Case{ReduceOp::kProduct, true},
                   Case{ReduceOp::kMean, false}}) {
      Buffer b(d, len);
      for (int64_t i = 0; i < len; ++i)
        b.Set(i, c.small ? Small(r, i) : V(r, i));
      testing::RequireOk(g.AllReduce(b.ref(), c.op), "all_reduce " + name);
      for (int64_t i = 0; i < len; ++i) {
        double sum = 0, prod = 1, mx = -1e30, mn = 1e30;
        for (int q = 0; q < n; ++q) {
          const double v = c.small ? Small(q, i) : V(q, i);
          sum += v, prod *= v, mx = std::max(mx, v), mn = std::min(mn, v);
        }
        double want = c.op == ReduceOp::kSum       ? sum
                      : c.op == ReduceOp::kMax     ? mx
                      : c.op == ReduceOp::kMin     ? mn
                      : c.op == ReduceOp::kProduct ? prod
                                                   : sum / n;
        if (c.op == ReduceOp::kMean && IsInt(d)) want = std::trunc(want);
        Near(b.Get(i), want,
             absl::StrCat("all_reduce ", ReduceOpName(c.op), " ", name));
      }
    }
    if (IsInt(d)) {
      Buffer b(d, len);
      for (int64_t i = 0; i < len; ++i) b.Set(i, (r * 5 + i) % 8);
      testing::RequireOk(g.AllReduce(b.ref(), ReduceOp::kBxor), "bxor");
      for (int64_t i = 0; i < len; ++i) {
        int64_t want = 0;
        for (int q = 0; q < n; ++q) want ^= (q * 5 + i) % 8;
        testing::Require(b.Get(i) == want, "bxor " + name);
      }
    } else {
      Buffer b(d, 3);
      testing::Require(g.AllReduce(b.ref(), ReduceOp::kBand).code() ==
                           absl::StatusCode::kInvalidArgument,
                       "band on a float must be refused");
    }
  }
  for (int root = 0; root < n; ++root) {
    Buffer b(d, len);
    for (int64_t i = 0; i < len; ++i)
      b.Set(i, d == DataType::kBool ? (root + i) % 2 : V(r, i));
    testing::RequireOk(g.Broadcast(b.ref(), root), "broadcast");
    for (int64_t i = 0; i < len; ++i)
      Near(b.Get(i), d == DataType::kBool ? (root + i) % 2 : V(root, i),
           "broadcast " + name);
  }
  Buffer in(d, len), out(d, len * n);
  for (int64_t i = 0; i < len; ++i)
    in.Set(i, d == DataType::kBool ? (r + i) % 2 : V(r, i));
  auto expect = [&](int q, int64_t i) {
    return d == DataType::kBool ? (q + i) % 2 : V(q, i);
  };
  testing::RequireOk(g.AllGather(in.ref(), out.ref()), "all_gather");
  for (int64_t j = 0; j < len * n; ++j)
    Near(out.Get(j), expect(j / len, j % len), "all_gather " + name);
  Buffer gathered(d, len * n);
  testing::RequireOk(g.Gather(in.ref(), gathered.ref(), n - 1), "gather");
  if (r == n - 1)
    for (int64_t j = 0; j < len * n; ++j)
      Near(gathered.Get(j), expect(j / len, j % len), "gather " + name);
  Buffer full(d, len * n), part(d, len);
  for (int64_t j = 0; j < len * n; ++j) full.Set(j, expect(j / len, j % len));
  testing::RequireOk(g.Scatter(full.ref(), part.ref(), 0), "scatter");
  for (int64_t i = 0; i < len; ++i)
    Near(part.Get(i), expect(r, i), "scatter " + name);
  Buffer a2a_in(d, 3 * n), a2a_out(d, 3 * n);
  for (int64_t j = 0; j < 3 * n; ++j)
    a2a_in.Set(j, d == DataType::kBool ? (r + j) % 2 : 10 * r + j);
  testing::RequireOk(g.AllToAll(a2a_in.ref(), a2a_out.ref()), "all_to_all");
  for (int64_t j = 0; j < 3 * n; ++j) {
    const int src = j / 3;
    const int64_t k = r * 3 + j % 3;
    Near(a2a_out.Get(j), d == DataType::kBool ? (src + k) % 2 : 10 * src + k,
         "all_to_all " + name);
  }
  if (d != DataType::kBool) {
    Buffer rs_in(d, len * n), rs_out(d, len);
    for (int64_t j = 0; j < len * n; ++j) rs_in.Set(j, V(r, j));
    testing::RequireOk(
        g.ReduceScatter(rs_in.ref(), rs_out.ref(), ReduceOp::kSum),
        "reduce_scatter");
    for (int64_t i = 0; i < len; ++i) {
      double want = 0;
      for (int q = 0; q < n; ++q) want += V(q, r * len + i);
      Near(rs_out.Get(i), want, "reduce_scatter " + name);
    }
    Buffer red(d, len);
    for (int64_t i = 0; i < len; ++i) red.Set(i, V(r, i));
    testing::RequireOk(g.Reduce(red.ref(), ReduceOp::kSum, 0), "reduce");
    for (int64_t i = 0; i < len; ++i) {
      double want = V(r, i);
      if (r == 0) {
        want = 0;
        for (int q = 0; q < n; ++q) want += V(q, i);
      }
      Near(red.Get(i), want, "reduce " + name);
    }
  }
}

}  // namespace
}  // namespace distkit

int main() {
  using namespace distkit;
  // A small all_to_all bound for the case below (read when first needed).
  setenv("DISTKIT_TEST_MPI_MAX_ALLTOALL", "1000", 1);
  dist::InitOptions options;
  options.backend = "mpi";
  options.timeout = absl::Seconds(60);
  testing::RequireOk(dist::InitDist("mpi", options),
                     "init_dist('mpi', backend='mpi')");
  rank_ = dist::GetRank();
  testing::SetCheckRank(rank_);
  size_ = dist::GetWorldSize();
  auto world = dist::GetDefaultGroup();
  testing::Require(world->backend_name() == "mpi", "backend");
  testing::Require(std::to_string(rank_) == std::getenv("OMPI_COMM_WORLD_RANK"),
                   "rank from MPI");
  // One store for the job: every rank's increment lands in it.
  std::shared_ptr<Store> store = dist::GetStore();
  testing::RequireOk(store->Add("mpi_job_store_check", 1).status(),
                     "add to the job's store");
  testing::RequireOk(world->Barrier(), "barrier after the adds");
  absl::StatusOr<int64_t> count = store->Add("mpi_job_store_check", 0);
  testing::Check(
      count.ok() && *count == size_,
      absl::StrCat("the job's store is shared: ", count.ok() ? *count : -1,
                   " of ", size_, " ranks counted"));
  for (DataType d :
       {DataType::kFloat32, DataType::kFloat64, DataType::kInt8,
        DataType::kUInt8, DataType::kInt32, DataType::kInt64,
        DataType::kFloat16, DataType::kBFloat16, DataType::kBool}) {
    AllOps(*world, d);
  }
  // Uneven all_to_all: q + 1 elements to rank q, valued 100 r + q.
  {
    const int n = size_, r = rank_;
    std::vector<int64_t> in, in_splits, out_splits(n, r + 1);
    for (int q = 0; q < n; ++q) {
      in_splits.push_back(q + 1);
      for (int k = 0; k <= q; ++k) in.push_back(100 * r + q);
    }
    std::vector<int64_t> out(n * (r + 1));
    testing::RequireOk(
        world->AllToAll(TensorRef(in.data(), in.size(), DataType::kInt64),
                        TensorRef(out.data(), out.size(), DataType::kInt64),
                        in_splits, out_splits),
        "uneven all_to_all");
    for (size_t j = 0; j < out.size(); ++j)
      testing::Require(out[j] == 100 * int64_t(j / (r + 1)) + r,
                       "uneven all_to_all");
  }
  // An uneven all_to_all past the backend's bound (MPI's int counts; 1000
  // here, DISTKIT_TEST_MPI_MAX_ALLTOALL) on one pair of ranks only: refused
  // on every rank alike, and the group goes on. (Each rank refused its own
  // splits alone: the others went into MPI_Ialltoallv, which MPI then
  // matched with the refusing ranks' next collective.)
  if (size_ > 1) {
    const int n = size_;
    std::vector<int64_t> in_splits(n, 0), out_splits(n, 0);
    if (rank_ == 0) in_splits[1] = 1001;
    if (rank_ == 1) out_splits[0] = 1001;
    std::vector<int8_t> in(rank_ == 0 ? 1001 : 0), out(rank_ == 1 ? 1001 : 0);
    absl::Status refused =
        world->AllToAll(TensorRef(in.data(), in.size(), DataType::kInt8),
                        TensorRef(out.data(), out.size(), DataType::kInt8),
                        in_splits, out_splits);
    testing::Check(
        refused.code() == absl::StatusCode::kInvalidArgument &&
            refused.message().find("reach past 1000") != std::string::npos,
        "an all_to_all past the bound, on every rank: " + refused.ToString());
    testing::RequireOk(world->Barrier(), "the group after the refusal");
  }
  // Send/recv around a ring, and a mismatched receive named on the receiver.
  if (size_ > 1) {
    const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
    std::vector<double> mine(11, rank_ + 0.5), theirs(11);
    auto s = world->SendAsync(TensorRef(mine.data(), 11, DataType::kFloat64),
                              next, 7);
    testing::RequireOk(
        world->Recv(TensorRef(theirs.data(), 11, DataType::kFloat64), prev, 7),
        "recv");
    testing::RequireOk(s->Wait(), "send");
    testing::Require(theirs[3] == prev + 0.5, "ring send/recv");
    std::vector<float> wrong(5);
    auto s2 = world->SendAsync(TensorRef(mine.data(), 11, DataType::kFloat64),
                               next, 8);
    absl::Status r =
        world->Recv(TensorRef(wrong.data(), 5, DataType::kFloat32), prev, 8);
    testing::Require(r.code() == absl::StatusCode::kInvalidArgument &&
                         r.message().find("float64 x11") != std::string::npos,
                     "mismatched receive: " + r.ToString());
    testing::RequireOk(s2->Wait(), "send");
  }
  // The application's own MPI messages on MPI_COMM_WORLD, with the tag and
  // peers of distkit's, sent first: distkit's receive must not take them
  // (its world is a communicator of its own), nor theirs distkit's.
  if (size_ > 1 && rank_ < 2) {
    const MpiLibrary& mpi = Mpi();
    auto finish = [&](MPI_Request request, const char* what) {
      int done = 0;
      while (!done) {
        testing::Require(
            DK_MPI(mpi.Test(&request, &done, MPI_STATUS_IGNORE)) == MPI_SUCCESS,
            what);
      }
    };
    int32_t app = 0;
    std::vector<float> ours(3, rank_ == 0 ? 2.5f : 0.0f);
    const TensorRef data(ours.data(), ours.size(), DataType::kFloat32);
    if (rank_ == 0) {
      app = 12345;
      MPI_Request request;
      testing::Require(
          DK_MPI(mpi.Isend(&app, 1, mpi.int32, 1, 9, mpi.comm_world,
                           &request)) == MPI_SUCCESS,
          "the application's MPI_Isend");
      testing::RequireOk(world->Send(data, 1, 9), "send beside MPI traffic");
      finish(request, "the application's send");
    } else {
      testing::RequireOk(world->Recv(data, 0, 9), "recv beside MPI traffic");
      MPI_Request request;
      testing::Require(
          DK_MPI(mpi.Irecv(&app, 1, mpi.int32, 0, 9, mpi.comm_world,
                           &request)) == MPI_SUCCESS,
          "the application's MPI_Irecv");
      finish(request, "the application's receive");
      testing::Check(
          ours[0] == 2.5f && ours[2] == 2.5f,
          absl::StrCat("distkit's message beside the application's: ", ours[0],
                       " ", ours[2]));
      testing::Check(app == 12345,
                     absl::StrCat("the application's message: ", app));
    }
  }
  // Different element counts across ranks: an error on every rank.
  if (size_ > 1) {
    std::vector<int32_t> v(10 + rank_, 1);
    absl::Status s = world->AllReduce(
        TensorRef(v.data(), v.size(), DataType::kInt32), ReduceOp::kSum);
    testing::Require(s.code() == absl::StatusCode::kInvalidArgument,
                     "mismatch: " + s.ToString());
    testing::Require(v[0] == 1, "a refused call must not change data");
  }
  // A subgroup {0, last} through MPI_Comm_split; the others are not members.
  std::vector<int> pair = {0};
  if (size_ > 1) pair.push_back(size_ - 1);
  auto sub = world->NewGroup(pair);
  testing::RequireOk(sub.status(), "new_group");
  std::vector<int32_t> v = {rank_ + 1};
  absl::Status s = (*sub)->AllReduce(TensorRef(v.data(), 1, DataType::kInt32),
                                     ReduceOp::kSum);
  if (rank_ == 0 || rank_ == size_ - 1) {
    testing::RequireOk(s, "subgroup all_reduce");
    testing::Require(v[0] == (size_ > 1 ? 1 + size_ : 1), "subgroup sum");
    AllOps(**sub, DataType::kFloat32);
  } else {
    testing::Require(s.code() == absl::StatusCode::kFailedPrecondition,
                     "non-member: " + s.ToString());
  }
  // Groups only their members create (as torch.distributed's new_group
  // calls a backend's creator): the even ranks, in reverse order, through
  // MPI_Comm_create_group; the odd ranks meanwhile make one of their own
  // and run on the world. The numbering of unnamed groups stays the same on
  // every rank afterwards.
  std::vector<int> mine;
  for (int r = size_ - 1; r >= 0; --r) {
    if (r % 2 == rank_ % 2) mine.push_back(r);
  }
  GroupOptions only;
  only.backend = "mpi";
  only.members_only = true;
  only.name = rank_ % 2 == 0 ? "evens" : "odds";
  auto own = world->NewGroup(mine, only);
  testing::RequireOk(own.status(), "members-only new_group");
  const int n = static_cast<int>(mine.size());
  testing::Require((*own)->size() == n, "members-only group size");
  testing::Require(
      (*own)->rank() ==
          static_cast<int>(std::find(mine.begin(), mine.end(), rank_) -
                           mine.begin()),
      "members-only group rank follows the order given");
  std::vector<int64_t> w = {rank_ + 1};
  testing::RequireOk((*own)->AllReduce(TensorRef(w.data(), 1, DataType::kInt64),
                                       ReduceOp::kSum),
                     "members-only all_reduce");
  int64_t want = 0;
  for (int r : mine) want += r + 1;
  testing::Require(w[0] == want, "members-only group sum");
  AllOps(**own, DataType::kFloat64);
  std::vector<int> outsider = {(rank_ + 1) % size_};
  if (size_ > 1) {
    auto refused = world->NewGroup(outsider, only);
    testing::Require(
        refused.status().code() == absl::StatusCode::kInvalidArgument,
        "a rank creating a members-only group it is not in: " +
            refused.status().ToString());
  }
  auto numbered = world->NewGroup({0});
  testing::RequireOk(numbered.status(), "new_group after named groups");
  testing::Require((*numbered)->name() == "world/2",
                   "unnamed groups are numbered alike on every rank: " +
                       (*numbered)->name());
  testing::RequireOk(world->Barrier(), "barrier");
  own->reset();
  numbered->reset();
  sub->reset();
  dist::DestroyDist();
  // Check's failures count (the program exited 0 after them before).
  return testing::FinishChecks(
      absl::StrCat("mpi backend checks, rank ", rank_, " of ", size_));
}
