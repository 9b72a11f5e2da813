#include "cc/comm/mpi/mpi_backend.h"

#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cc/comm/mpi/mpi_library.h"
#include "cc/comm/mpi/mpi_runtime.h"
#include "cc/comm/mpi/mpi_types.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// MPI guarantees tags up to 32767.
constexpr int kMaxTag = 32767;

// A tag in MPI's guaranteed range, the same in every process for `name`
// (FNV-1a: absl::Hash is seeded per process).
int TagOf(absl::string_view name) {
  uint32_t h = 2166136261u;
  for (unsigned char c : name) h = (h ^ c) * 16777619u;
  return static_cast<int>(h % (kMaxTag + 1));
}

}  // namespace

// ---- Construction --------------------------------------------------------

MpiBackend::MpiBackend(MPI_Comm comm, int rank, int size)
    : mpi_(Mpi()), comm_(comm), rank_(rank), size_(size) {}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  mpi_.Finalized(&finalized);
  if (!finalized && !abandoned_ && comm_ != mpi_.comm_world &&
      comm_ != mpi_.comm_null) {
    DK_MPI(mpi_.CommFree(&comm_));
  }
}

absl::StatusOr<std::unique_ptr<MpiBackend>> MpiBackend::CreateWorld(
    int rank, int size, absl::Duration init_timeout) {
  DK_ASSIGN_OR_RETURN(auto world, MpiWorldRankAndSize(init_timeout));
  if (world.first != rank || world.second != size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mpi: the launcher says rank ", rank, " of ", size,
        " but MPI_COMM_WORLD says rank ", world.first, " of ", world.second,
        " (start the job with mpirun; subgroups come from "
        "new_group on an mpi group)"));
  }
  // A communicator of distkit's own, as libraries over MPI make (Horovod
  // does): the application's messages and collectives on MPI_COMM_WORLD
  // (mpi4py beside distkit) then never match distkit's, whatever their
  // tags and order. Nonblocking, so a rank that never comes is a timeout;
  // the handle is heap memory, leaked on that error (MPI may still write
  // it: MpiWorldCollective).
  const MpiLibrary& mpi = Mpi();
  auto* dup = new MPI_Comm(mpi.comm_null);
  DK_RETURN_IF_ERROR(MpiWorldCollective(
      "MPI_Comm_idup of MPI_COMM_WORLD (distkit's own world communicator)",
      [&](MPI_Request* r) { return mpi.CommIdup(mpi.comm_world, dup, r); },
      init_timeout));
  MPI_Comm comm = *dup;
  delete dup;
  DK_MPI(mpi.CommSetErrhandler(comm, mpi.errors_return));
  return std::unique_ptr<MpiBackend>(new MpiBackend(comm, rank, size));
}

absl::StatusOr<std::unique_ptr<Backend>> MpiBackend::Split(
    const OpContext& ctx, const std::vector<int>& parent_ranks) {
  int key = -1;
  for (size_t i = 0; i < parent_ranks.size(); ++i)
    if (parent_ranks[i] == rank_) key = static_cast<int>(i);
  // MPI_Comm_split blocks until every rank of this group has called it, and
  // has no timeout (MPI has no nonblocking split). Made under MPI's lock it
  // would stop every other MPI operation of the process until then, so it
  // is made outside it (MPI_THREAD_MULTIPLE allows it), on a thread of its
  // own that owns what it touches: a rank that never comes is a timeout here
  // (the thread then stays in MPI until the process exits; this group is
  // poisoned and its communicator never freed). Collectives of one group run
  // one at a time, so no other collective of this communicator runs beside
  // it; its sends and receives may, as MPI allows.
  DK_ASSIGN_OR_RETURN(
      MPI_Comm comm,
      CommOnOwnThread(
          ctx,
          [mpi = &mpi_, parent = comm_, color = key >= 0 ? 0 : MPI_UNDEFINED,
           key = std::max(key, 0)](MPI_Comm* out) {
            return mpi->CommSplit(parent, color, key, out);
          },
          "MPI_Comm_split",
          absl::StrCat("waiting for the group's ", size_, " ranks")));
  if (key < 0) return std::unique_ptr<Backend>();
  DK_MPI(mpi_.CommSetErrhandler(comm, mpi_.errors_return));
  int size = 0;
  DK_MPI(mpi_.CommSize(comm, &size));
  return std::unique_ptr<Backend>(new MpiBackend(comm, key, size));
}

absl::StatusOr<std::unique_ptr<Backend>> MpiBackend::CreateAmongMembers(
    const OpContext& ctx, const std::vector<int>& parent_ranks,
    absl::string_view name) {
  int key = -1;
  for (size_t i = 0; i < parent_ranks.size(); ++i)
    if (parent_ranks[i] == rank_) key = static_cast<int>(i);
  if (key < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx.Describe(), ": rank ", rank_, " is not a member of the new group"));
  }
  if (abandoned_) {
    // An earlier creation timed out and its thread may still be inside
    // MPI_Comm_create_group on this communicator, where a retry with the
    // same tag could meet it.
    return absl::FailedPreconditionError(absl::StrCat(
        ctx.Describe(), " (rank ", rank_,
        "): an earlier operation on this MPI group timed out or was aborted; "
        "make new groups from a healthy one"));
  }
  MPI_Group parent_group = mpi_.group_null, members = mpi_.group_null;
  DK_RETURN_IF_ERROR(Check(ctx, DK_MPI(mpi_.CommGroup(comm_, &parent_group)),
                           "MPI_Comm_group"));
  const int rc =
      DK_MPI(mpi_.GroupIncl(parent_group, static_cast<int>(parent_ranks.size()),
                            parent_ranks.data(), &members));
  DK_MPI(mpi_.GroupFree(&parent_group));
  DK_RETURN_IF_ERROR(Check(ctx, rc, "MPI_Group_incl"));
  // MPI_Comm_create_group blocks until every member has called it, so it is
  // made outside MPI's lock (MPI_THREAD_MULTIPLE allows it): this group's
  // queue and lanes keep progressing meanwhile, and a member still in an
  // earlier operation with this one can finish it. On a thread of its own,
  // owning what it touches, so that a member that never comes is a timeout
  // (the thread then ends with the process; MPI_Finalize is skipped).
  DK_ASSIGN_OR_RETURN(
      MPI_Comm comm,
      CommOnOwnThread(
          ctx,
          [mpi = &mpi_, parent = comm_, members,
           tag = TagOf(name)](MPI_Comm* out) mutable {
            const int rc = mpi->CommCreateGroup(parent, members, tag, out);
            DK_MPI(mpi->GroupFree(&members));
            return rc;
          },
          "MPI_Comm_create_group",
          absl::StrCat("waiting for the members (", parent_ranks.size(),
                       " ranks) of group '", name,
                       "': each must create it, with the same ranks")));
  DK_MPI(mpi_.CommSetErrhandler(comm, mpi_.errors_return));
  return std::unique_ptr<Backend>(
      new MpiBackend(comm, key, static_cast<int>(parent_ranks.size())));
}

// Runs `call` (a communicator's blocking creation, which has no timeout) on
// a thread of its own that owns what it touches, outside MPI's lock
// (MPI_THREAD_MULTIPLE allows it), and waits for it within ctx.timeout and
// abort: a rank that never comes is DEADLINE_EXCEEDED (or CANCELLED) here,
// and the thread then stays in MPI until the process exits, so this group
// is marked abandoned (poisoned; its communicator is never freed).
absl::StatusOr<MPI_Comm> MpiBackend::CommOnOwnThread(
    const OpContext& ctx, std::function<int(MPI_Comm*)> call, const char* what,
    const std::string& waiting_for) {
  struct Outcome {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    int rc ABSL_GUARDED_BY(mu) = MPI_SUCCESS;
    MPI_Comm comm ABSL_GUARDED_BY(mu) = nullptr;  // the thread's result
  };
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, call = std::move(call), null = mpi_.comm_null] {
    MPI_Comm comm = null;
    const int rc = call(&comm);
    absl::MutexLock lock(&outcome->mu);
    outcome->rc = rc;
    outcome->comm = comm;
    outcome->done = true;
  }).detach();
  const absl::Time deadline = absl::Now() + ctx.timeout;
  absl::MutexLock lock(&outcome->mu);
  while (!outcome->mu.AwaitWithDeadline(
      absl::Condition(&outcome->done),
      std::min(deadline, absl::Now() + absl::Milliseconds(20)))) {
    if (aborted_ || absl::Now() >= deadline) {
      abandoned_ = true;  // the thread may still use this communicator
      MarkMpiRequestAbandoned();
      if (aborted_) {
        return absl::CancelledError(
            absl::StrCat(Where(ctx), ": the group was aborted"));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          Where(ctx), ": timed out after ", absl::FormatDuration(ctx.timeout),
          " in ", what, " ", waiting_for));
    }
  }
  DK_RETURN_IF_ERROR(Check(ctx, outcome->rc, what));
  return outcome->comm;
}

// ---- Completion ----------------------------------------------------------

std::string MpiBackend::Where(const OpContext& ctx) const {
  return absl::StrCat(ctx.Describe(), " (rank ", rank_, ")");
}

absl::Status MpiBackend::Check(const OpContext& ctx, int rc,
                               const char* call) const {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(Where(ctx), ": ", call, ": ", MpiError(rc)));
}

absl::StatusOr<int> MpiBackend::Count(int64_t n, const OpContext& ctx) const {
  if (n > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(ctx), ": ", n, " elements exceed MPI's int count"));
  }
  return static_cast<int>(n);
}

void MpiBackend::Abort() { aborted_ = true; }

absl::Status MpiBackend::Complete(const OpContext& ctx, MPI_Request request,
                                  std::unique_ptr<MpiStage>& stage,
                                  bool receive) {
  const absl::Time deadline = absl::Now() + ctx.timeout;
  int spins = 0;
  while (true) {
    int done = 0;
    const int rc = DK_MPI(mpi_.Test(&request, &done, MPI_STATUS_IGNORE));
    if (rc != MPI_SUCCESS) {
      // Whether MPI still holds the request is not certain: its stage is
      // never freed.
      abandoned_ = true;
      MarkMpiRequestAbandoned();
      stage.release();
      return Check(ctx, rc, "MPI_Test");
    }
    if (done) return absl::OkStatus();
    absl::Status stuck;
    if (aborted_) {
      stuck = absl::CancelledError(
          absl::StrCat(Where(ctx), ": the group was aborted"));
    } else if ((++spins & 1023) == 0 && absl::Now() > deadline) {
      stuck = absl::DeadlineExceededError(absl::StrCat(
          Where(ctx), ": timed out after ", absl::FormatDuration(ctx.timeout),
          " waiting for peers"));
    }
    if (!stuck.ok()) {
      abandoned_ = true;
      MarkMpiRequestAbandoned();
      // MPI may still read and write the stage (a late peer, any later MPI
      // call's progress): it stays alive until the request completes. A
      // receive is cancelled first (a cancelled receive completes at the
      // next test); a collective's request cannot be.
      absl::MutexLock lock(&MpiMutex());
      if (receive) mpi_.Cancel(&request);
      QuarantineMpiRequestLocked(request, std::move(stage));
      PollMpiQuarantineLocked();
      return stuck;
    }
    sched_yield();  // ranks may share cores
  }
}

// ---- Collectives ---------------------------------------------------------
//
// Each copies its inputs into a stage, hands MPI the stage alone (separate
// send and receive regions, so MPI never gets aliased buffers, whatever the
// caller's), and copies the outputs out only once the request completed
// (Staged; all_to_all with splits stages its counts too).

namespace {

void Copy(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memcpy(to, from, bytes);
}

// Where a region of `bytes` bytes that is copied from or to the caller's
// `like` starts in a page-aligned stage, at or after `*at` (advanced past
// it): at `like`'s offset within a page, so that the two are a whole number
// of pages apart. A copy between buffers a few bytes apart modulo a page
// (malloc's 16-byte alignment against a page-aligned stage) ran 16 times
// slower here (64 KiB: 33 us against 2; rep movsb).
size_t Region(size_t* at, const void* like, size_t bytes) {
  constexpr size_t kPage = 4096;
  const size_t offset = reinterpret_cast<uintptr_t>(like) & (kPage - 1);
  size_t start = (*at & ~(kPage - 1)) + offset;
  if (start < *at) start += kPage;
  *at = start + bytes;
  return start;
}

}  // namespace

// At most two buffers (a send and a receive), whose regions are laid out in
// this order.
absl::Status MpiBackend::StagedAll(
    const OpContext& ctx, const char* call,
    absl::Span<const StagedBuffer> buffers,
    absl::FunctionRef<int(char* const* staged, MPI_Request*)> start,
    bool receive) {
  constexpr size_t kMost = 2;
  size_t at[kMost];
  size_t end = 0;
  for (size_t i = 0; i < buffers.size(); ++i) {
    at[i] = Region(&end, buffers[i].caller, buffers[i].bytes);
  }
  auto stage = Stage(end);
  char* staged[kMost];
  for (size_t i = 0; i < buffers.size(); ++i) {
    staged[i] = stage->data() + at[i];
    if (buffers[i].in) Copy(staged[i], buffers[i].caller, buffers[i].bytes);
  }
  DK_RETURN_IF_ERROR(Nonblocking(
      ctx, call, stage, [&](auto* req) { return start(staged, req); },
      receive));
  for (size_t i = 0; i < buffers.size(); ++i) {
    // An `out` buffer is one the caller gave to be written.
    if (buffers[i].out) {
      Copy(const_cast<void*>(buffers[i].caller), staged[i], buffers[i].bytes);
    }
  }
  Unstage(std::move(stage));
  return absl::OkStatus();
}

absl::Status MpiBackend::Staged(
    const OpContext& ctx, const char* call, StagedBuffer buf,
    absl::FunctionRef<int(char* buf, MPI_Request*)> start, bool receive) {
  return StagedAll(
      ctx, call, {buf},
      [&](char* const* staged, MPI_Request* req) {
        return start(staged[0], req);
      },
      receive);
}

absl::Status MpiBackend::Staged(
    const OpContext& ctx, const char* call, StagedBuffer send,
    StagedBuffer recv,
    absl::FunctionRef<int(char* send, char* recv, MPI_Request*)> start) {
  return StagedAll(
      ctx, call, {send, recv},
      [&](char* const* staged, MPI_Request* req) {
        return start(staged[0], staged[1], req);
      },
      /*receive=*/false);
}

absl::Status MpiBackend::AllGatherHost(const OpContext& ctx, const void* in,
                                       size_t bytes, void* out) {
  DK_ASSIGN_OR_RETURN(int n, Count(static_cast<int64_t>(bytes), ctx));
  return Staged(ctx, "MPI_Iallgather", {in, bytes, true, false},
                {out, bytes * size_, false, true},
                [&](char* send, char* recv, MPI_Request* req) {
                  return mpi_.Iallgather(send, n, mpi_.byte, recv, n, mpi_.byte,
                                         comm_, req);
                });
}

absl::Status MpiBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                   ReduceOp op) {
  DK_ASSIGN_OR_RETURN(MpiTypeAndOp t, MpiReduction(data.dtype(), op));
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  return Staged(ctx, "MPI_Iallreduce", {data.data(), data.nbytes(), true, true},
                [&](char* buf, MPI_Request* req) {
                  return mpi_.Iallreduce(MPI_IN_PLACE, buf, n, t.type, t.op,
                                         comm_, req);
                });
}

absl::Status MpiBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                   int root) {
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  const MPI_Datatype type = MpiElementType(data.dtype());
  const bool is_root = rank_ == root;
  return Staged(ctx, "MPI_Ibcast",
                {data.data(), data.nbytes(), is_root, !is_root},
                [&](char* buf, MPI_Request* req) {
                  return mpi_.Ibcast(buf, n, type, root, comm_, req);
                });
}

absl::Status MpiBackend::Reduce(const OpContext& ctx, TensorRef data,
                                ReduceOp op, int root) {
  DK_ASSIGN_OR_RETURN(MpiTypeAndOp t, MpiReduction(data.dtype(), op));
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  const bool is_root = rank_ == root;
  // The root reduces in place; the others' data stays unchanged.
  return Staged(ctx, "MPI_Ireduce", {data.data(), data.nbytes(), true, is_root},
                [&](char* buf, MPI_Request* req) {
                  const void* send = is_root ? MPI_IN_PLACE : buf;
                  void* recv = is_root ? buf : nullptr;
                  return mpi_.Ireduce(send, recv, n, t.type, t.op, root, comm_,
                                      req);
                });
}

absl::Status MpiBackend::AllGather(const OpContext& ctx, TensorRef input,
                                   TensorRef output) {
  DK_ASSIGN_OR_RETURN(int n, Count(input.numel(), ctx));
  const MPI_Datatype type = MpiElementType(input.dtype());
  const size_t bytes = input.nbytes();
  return Staged(ctx, "MPI_Iallgather", {input.data(), bytes, true, false},
                {output.data(), bytes * size_, false, true},
                [&](char* send, char* recv, MPI_Request* req) {
                  return mpi_.Iallgather(send, n, type, recv, n, type, comm_,
                                         req);
                });
}

absl::Status MpiBackend::Gather(const OpContext& ctx, TensorRef input,
                                TensorRef output, int root) {
  DK_ASSIGN_OR_RETURN(int n, Count(input.numel(), ctx));
  const MPI_Datatype type = MpiElementType(input.dtype());
  const bool is_root = rank_ == root;
  const size_t bytes = input.nbytes(), total = is_root ? bytes * size_ : 0;
  return Staged(ctx, "MPI_Igather", {input.data(), bytes, true, false},
                {output.data(), total, false, is_root},
                [&](char* send, char* recv, MPI_Request* req) {
                  return mpi_.Igather(send, n, type, is_root ? recv : nullptr,
                                      n, type, root, comm_, req);
                });
}

absl::Status MpiBackend::Scatter(const OpContext& ctx, TensorRef input,
                                 TensorRef output, int root) {
  DK_ASSIGN_OR_RETURN(int n, Count(output.numel(), ctx));
  const MPI_Datatype type = MpiElementType(output.dtype());
  const bool is_root = rank_ == root;
  const size_t bytes = output.nbytes(), total = is_root ? bytes * size_ : 0;
  return Staged(ctx, "MPI_Iscatter", {input.data(), total, is_root, false},
                {output.data(), bytes, false, true},
                [&](char* send, char* recv, MPI_Request* req) {
                  return mpi_.Iscatter(is_root ? send : nullptr, n, type, recv,
                                       n, type, root, comm_, req);
                });
}

absl::Status MpiBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                       TensorRef output, ReduceOp op) {
  DK_ASSIGN_OR_RETURN(MpiTypeAndOp t, MpiReduction(output.dtype(), op));
  DK_ASSIGN_OR_RETURN(int n, Count(output.numel(), ctx));
  const size_t bytes = output.nbytes();
  return Staged(ctx, "MPI_Ireduce_scatter_block",
                {input.data(), bytes * size_, true, false},
                {output.data(), bytes, false, true},
                [&](char* send, char* recv, MPI_Request* req) {
                  return mpi_.IreduceScatterBlock(send, recv, n, t.type, t.op,
                                                  comm_, req);
                });
}

int64_t MpiBackend::MaxAllToAllElements() const {
  // Test-only: a small limit, so that a test need not move 2^31 elements
  // to reach it.
  static const int64_t most = [] {
    const char* limit = std::getenv("DISTKIT_TEST_MPI_MAX_ALLTOALL");
    return limit != nullptr ? int64_t{std::atoll(limit)}
                            : int64_t{std::numeric_limits<int>::max()};
  }();
  return most;
}

absl::Status MpiBackend::AllToAll(const OpContext& ctx, TensorRef input,
                                  absl::Span<const int64_t> input_splits,
                                  TensorRef output,
                                  absl::Span<const int64_t> output_splits) {
  const MPI_Datatype type = MpiElementType(input.dtype());
  const size_t in_bytes = input.nbytes(), out_bytes = output.nbytes();
  if (input_splits.empty() && output_splits.empty()) {
    DK_ASSIGN_OR_RETURN(int n, Count(input.numel() / size_, ctx));
    return Staged(ctx, "MPI_Ialltoall", {input.data(), in_bytes, true, false},
                  {output.data(), out_bytes, false, true},
                  [&](char* send, char* recv, MPI_Request* req) {
                    return mpi_.Ialltoall(send, n, type, recv, n, type, comm_,
                                          req);
                  });
  }
  size_t end = 0;
  const size_t send_at = Region(&end, input.data(), in_bytes);
  const size_t recv_at = Region(&end, output.data(), out_bytes);
  // The counts and displacements are MPI's until the request completes:
  // they live in the stage too.
  auto stage = Stage(end);
  std::vector<int>& ints = stage->ints();
  ints.resize(4 * size_);
  int* scounts = ints.data();
  int* sdispls = scounts + size_;
  int* rcounts = sdispls + size_;
  int* rdispls = rcounts + size_;
  int64_t sat = 0, rat = 0;
  for (int r = 0; r < size_; ++r) {
    DK_ASSIGN_OR_RETURN(scounts[r], Count(input_splits[r], ctx));
    DK_ASSIGN_OR_RETURN(rcounts[r], Count(output_splits[r], ctx));
    DK_ASSIGN_OR_RETURN(sdispls[r], Count(sat, ctx));
    DK_ASSIGN_OR_RETURN(rdispls[r], Count(rat, ctx));
    sat += input_splits[r];
    rat += output_splits[r];
  }
  char* send = stage->data() + send_at;
  char* recv = stage->data() + recv_at;
  Copy(send, input.data(), in_bytes);
  DK_RETURN_IF_ERROR(Nonblocking(ctx, "MPI_Ialltoallv", stage, [&](auto* req) {
    return mpi_.Ialltoallv(send, scounts, sdispls, type, recv, rcounts, rdispls,
                           type, comm_, req);
  }));
  Copy(output.data(), recv, out_bytes);
  Unstage(std::move(stage));
  return absl::OkStatus();
}

// ---- Point to point ------------------------------------------------------

absl::Status MpiBackend::CheckTag(const OpContext& ctx, int tag) const {
  if (tag >= 0 && tag <= kMaxTag) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(Where(ctx), ": tag ", tag, " is outside [0, ", kMaxTag,
                   "] (the mpi backend's range)"));
}

// Messages with one (peer, tag) do not overtake each other in MPI: the
// contract's header arrives before its data. Counted in elements (a
// contiguous type of the element's bytes, MpiElementBytes), as the collectives
// are, so a tensor moves whenever its all_reduce can (2^31 - 1 elements, not
// bytes).
absl::Status MpiBackend::Send(const OpContext& ctx, TensorRef data, int dst,
                              int tag) {
  DK_RETURN_IF_ERROR(CheckTag(ctx, tag));
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  const MPI_Datatype type = MpiElementBytes(data.dtype());  // not under DK_MPI
  return Staged(ctx, "MPI_Isend", {data.data(), data.nbytes(), true, false},
                [&](char* buf, MPI_Request* req) {
                  return mpi_.Isend(buf, n, type, dst, tag, comm_, req);
                });
}

absl::Status MpiBackend::Recv(const OpContext& ctx, TensorRef data, int src,
                              int tag) {
  DK_RETURN_IF_ERROR(CheckTag(ctx, tag));
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  const MPI_Datatype type = MpiElementBytes(data.dtype());  // not under DK_MPI
  return Staged(
      ctx, "MPI_Irecv", {data.data(), data.nbytes(), false, true},
      [&](char* buf, MPI_Request* req) {
        return mpi_.Irecv(buf, n, type, src, tag, comm_, req);
      },
      /*receive=*/true);
}

}  // namespace distkit
