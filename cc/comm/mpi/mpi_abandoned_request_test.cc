// What MPI may touch after an operation of the mpi backend gave up (timed
// out): nothing of the caller's. Run under mpirun with N >= 2 ranks, on the
// backend itself (no contract, so that each MPI call is the test's own): the
// last rank (the early one) times out in a receive and in an all_reduce, and
// goes on using MPI on other communicators while the other ranks come late
// and complete the operations it gave up. Its buffers must hold what it left
// in them (MPI wrote the freed header on the stack, the tensors the caller
// had freed, before), and a late rank's all_reduce that returns OK must hold
// the right sum (it read the early rank's freed buffer before). Then a split
// that a rank is late to: the early rank's times out, and its other groups
// keep working meanwhile (MPI_Comm_split held MPI's lock, without timeout).
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cc/comm/mpi/mpi_backend.h"
#include "cc/comm/mpi/mpi_library.h"
#include "cc/comm/mpi/mpi_staging.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace {

OpContext Ctx(OpCode op, absl::Duration timeout) {
  OpContext ctx;
  ctx.op = op;
  ctx.group_name = "test";
  ctx.timeout = timeout;
  return ctx;
}

// A barrier that also drives MPI's progress engine while it waits (every
// rank's pending requests progress in any MPI call).
void Sync(Backend& side, const std::string& what) {
  int32_t one = 1;
  testing::RequireOk(
      side.AllReduce(Ctx(OpCode::kAllReduce, absl::Seconds(60)),
                     TensorRef(&one, 1, DataType::kInt32), ReduceOp::kSum),
      "sync " + what);
  testing::Require(one == side.size(), "sync sum " + what);
}

int Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -1 : std::atoi(v);
}

}  // namespace
}  // namespace distkit

int main() {
  using namespace distkit;
  const int rank = Env("OMPI_COMM_WORLD_RANK"),
            size = Env("OMPI_COMM_WORLD_SIZE");
  testing::SetCheckRank(rank);
  testing::Require(size >= 2, "run with mpirun -np N, N >= 2");
  auto created = MpiBackend::CreateWorld(rank, size, absl::Seconds(60));
  testing::RequireOk(created.status(), "the world");
  std::unique_ptr<MpiBackend> world = std::move(*created);
  std::vector<int> all;
  for (int r = 0; r < size; ++r) all.push_back(r);
  if (std::getenv("DISTKIT_TEST_MPI_BIG_P2P") != nullptr) {
    // By hand only (10 GiB of memory): a send of more than 2^31 bytes
    // (2^31 - 1 elements is the bound, as for every collective).
    const int64_t n = (int64_t{1} << 29) + 3;  // float32: 2 GiB + 12 bytes
    std::vector<float> big(n, rank == 0 ? 3.0f : 0.0f);
    const TensorRef t(big.data(), n, DataType::kFloat32);
    const OpContext ctx = Ctx(OpCode::kSend, absl::Seconds(120));
    if (rank == 0) testing::RequireOk(world->Send(ctx, t, 1, 3), "big send");
    if (rank == 1) {
      testing::RequireOk(world->Recv(ctx, t, 0, 3), "big recv");
      testing::Require(big[0] == 3.0f && big[n - 1] == 3.0f, "big values");
    }
    const int status = testing::FinishChecks("big p2p");
    Mpi().Finalize();
    _exit(status);
  }
  // Two more communicators over every rank: `side` to coordinate (and to
  // split late), `side2` to coordinate while a split of `side` is pending.
  auto split = world->Split(Ctx(OpCode::kNewGroup, absl::Seconds(60)), all);
  testing::RequireOk(split.status(), "split side");
  std::unique_ptr<Backend> side = std::move(*split);
  split = world->Split(Ctx(OpCode::kNewGroup, absl::Seconds(60)), all);
  testing::RequireOk(split.status(), "split side2");
  std::unique_ptr<Backend> side2 = std::move(*split);
  const int early = size - 1;
  const absl::Duration brief = absl::Milliseconds(200);

  // ---- A receive that gives up, and a send that comes after --------------
  // A small one (the contract's header, on its stack) and a large one (past
  // the eager limit: MPI writes it at a later progress).
  const size_t kSmall = 16, kLarge = 1 << 18;  // floats
  auto small = std::make_unique<char[]>(kSmall);
  std::vector<float> large(kLarge, 7.5f);
  std::memset(small.get(), 'A', kSmall);
  if (rank == early) {
    absl::Status s =
        world->Recv(Ctx(OpCode::kRecv, brief),
                    TensorRef(small.get(), kSmall, DataType::kUInt8), 0, 5);
    testing::Check(s.code() == absl::StatusCode::kDeadlineExceeded,
                   "the early small receive times out: " + s.ToString());
    testing::Check(s.message().find(absl::StrCat("(rank ", rank, ")")) !=
                       std::string::npos,
                   "the timeout names the rank: " + s.ToString());
    s = world->Recv(Ctx(OpCode::kRecv, brief),
                    TensorRef(large.data(), kLarge, DataType::kFloat32), 0, 6);
    testing::Check(s.code() == absl::StatusCode::kDeadlineExceeded,
                   "the early large receive times out: " + s.ToString());
  }
  Sync(*side, "after the receives gave up");
  if (rank == 0) {
    // What these sends return depends on whether a receive still takes
    // them: nothing is checked but that the early rank's memory is not
    // written.
    std::vector<char> z(kSmall, 'Z');
    std::vector<float> big(kLarge, -1.0f);
    (void)world->Send(Ctx(OpCode::kSend, absl::Seconds(2)),
                      TensorRef(z.data(), kSmall, DataType::kUInt8), early, 5);
    (void)world->Send(Ctx(OpCode::kSend, absl::Seconds(2)),
                      TensorRef(big.data(), kLarge, DataType::kFloat32), early,
                      6);
  }
  for (int i = 0; i < 3; ++i) Sync(*side, "after the late sends");
  usleep(100000);
  Sync(*side, "after the late sends");
  if (rank == early) {
    int written = 0;
    for (size_t i = 0; i < kSmall; ++i) written += small[i] != 'A';
    testing::Check(written == 0,
                   absl::StrCat("a receive that timed out wrote ", written,
                                " bytes of its buffer afterwards"));
    written = 0;
    for (float f : large) written += f != 7.5f;
    testing::Check(written == 0,
                   absl::StrCat("a large receive that timed out wrote ",
                                written, " elements afterwards"));
    // The receives that gave up took nothing: the messages wait for the
    // next receives.
    absl::Status s =
        world->Recv(Ctx(OpCode::kRecv, absl::Seconds(10)),
                    TensorRef(small.get(), kSmall, DataType::kUInt8), 0, 5);
    testing::CheckOk(s, "a later small receive");
    testing::Check(s.ok() && small[0] == 'Z' && small[kSmall - 1] == 'Z',
                   "a later small receive gets the message");
    s = world->Recv(Ctx(OpCode::kRecv, absl::Seconds(10)),
                    TensorRef(large.data(), kLarge, DataType::kFloat32), 0, 6);
    testing::CheckOk(s, "a later large receive");
    testing::Check(s.ok() && large[0] == -1.0f && large[kLarge - 1] == -1.0f,
                   "a later large receive gets the message");
  }
  Sync(*side, "after the later receives");

  // ---- An all_reduce the early rank gives up on ---------------------------
  // Large enough that MPI reads the send data after the call was made.
  const size_t kCount = 1 << 18;
  std::vector<float> mine(kCount, rank == early ? 7.0f : 1.0f);
  if (rank == early) {
    absl::Status s = world->AllReduce(
        Ctx(OpCode::kAllReduce, brief),
        TensorRef(mine.data(), kCount, DataType::kFloat32), ReduceOp::kSum);
    testing::Check(s.code() == absl::StatusCode::kDeadlineExceeded,
                   "the early all_reduce times out: " + s.ToString());
    // The caller frees (here: reuses) its tensor after the error.
    std::fill(mine.begin(), mine.end(), 1000.0f);
  }
  Sync(*side, "after the all_reduce gave up");
  if (rank != early) {
    absl::Status s = world->AllReduce(
        Ctx(OpCode::kAllReduce, absl::Seconds(30)),
        TensorRef(mine.data(), kCount, DataType::kFloat32), ReduceOp::kSum);
    // With the early rank gone, its part may still complete: never with
    // memory it no longer owned.
    if (s.ok()) {
      const float want = 7.0f + (size - 1);
      int wrong = 0;
      float example = want;
      for (float f : mine) {
        if (f != want && wrong++ == 0) example = f;
      }
      testing::Check(wrong == 0,
                     absl::StrCat("a late all_reduce returned OK with ", wrong,
                                  " wrong elements (e.g. ", example, ", want ",
                                  want, ")"));
    } else {
      testing::Check(s.code() == absl::StatusCode::kDeadlineExceeded,
                     "the late all_reduce: " + s.ToString());
    }
  }
  for (int i = 0; i < 3; ++i) Sync(*side, "after the late all_reduce");
  if (rank == early) {
    int written = 0;
    for (float f : mine) written += f != 1000.0f;
    testing::Check(written == 0,
                   absl::StrCat("an all_reduce that timed out wrote ", written,
                                " elements of the caller's tensor afterwards"));
  }
  // The quarantined requests complete (or were cancelled), and their stages
  // are freed, as later MPI calls poll them.
  auto drain = [&](const std::string& when) {
    int64_t left = 1;
    for (int i = 0; i < 50 && left > 0; ++i) {
      left = static_cast<int64_t>(MpiQuarantineSize());
      testing::RequireOk(
          side2->AllReduce(Ctx(OpCode::kAllReduce, absl::Seconds(60)),
                           TensorRef(&left, 1, DataType::kInt64),
                           ReduceOp::kSum),
          "draining the quarantine");
      if (left > 0) usleep(10000);
    }
    testing::Check(left == 0, absl::StrCat(left, " requests still quarantined ",
                                           when, " (every rank)"));
    return left == 0;
  };
  drain("after the late operations");

  // ---- A split the other ranks are late to --------------------------------
  if (rank == early) {
    const absl::Time start = absl::Now();
    auto late =
        side->Split(Ctx(OpCode::kNewGroup, absl::Milliseconds(300)), all);
    const absl::Duration took = absl::Now() - start;
    testing::Check(
        late.status().code() == absl::StatusCode::kDeadlineExceeded,
        "a split nobody else joins times out: " + late.status().ToString());
    testing::Check(
        took < absl::Seconds(5),
        absl::StrCat("the split returned after ", absl::FormatDuration(took),
                     " (timeout 300ms)"));
    // Another group works while the split is pending.
    Sync(*side2, "beside a pending split");
  } else {
    Sync(*side2, "beside a pending split");
    auto late = side->Split(Ctx(OpCode::kNewGroup, absl::Seconds(30)), all);
    testing::CheckOk(late.status(), "the late ranks' split");
  }
  Sync(*side2, "at the end");
  const bool drained = drain("at the end");
  const int status = testing::FinishChecks(
      absl::StrCat("mpi abandoned requests, rank ", rank, " of ", size));
  fflush(stdout);
  fflush(stderr);
  // Requests were given up on, so the process would skip MPI_Finalize at
  // exit, which mpirun reports as a failure; every one has completed, so it
  // is made here.
  usleep(200000);  // the early rank's split thread returns from MPI
  if (drained) Mpi().Finalize();
  _exit(status);
}
