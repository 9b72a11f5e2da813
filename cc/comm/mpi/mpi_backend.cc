#include "cc/comm/mpi/mpi_backend.h"

#include <sched.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// ---- Process-wide MPI state ----------------------------------------------

// Every MPI call goes through one lock, so a group's worker and its
// point-to-point lanes never drive OpenMPI's progress engine at the same
// time (its shared-memory transport is the least tested part under
// MPI_THREAD_MULTIPLE). All calls are nonblocking: the lock is held briefly.
absl::Mutex& MpiMutex() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}
#define DK_MPI(call)                        \
  ([&] {                                    \
    absl::MutexLock mpi_lock_(&MpiMutex()); \
    return call;                            \
  }())

absl::once_flag init_once;
absl::Status init_status;
std::atomic<bool> any_poisoned{false};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A request left pending by a timeout or abort could make MPI_Finalize
  // wait forever: skip it then (mpirun reports the abnormal exit).
  if (!finalized && !any_poisoned.load()) MPI_Finalize();
}

void InitializeMpi() {
  int initialized = 0;
  DK_MPI(MPI_Initialized(&initialized));
  int provided = 0;
  if (!initialized) {
    if (DK_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE,
                               &provided)) != MPI_SUCCESS) {
      init_status = absl::UnavailableError("MPI_Init_thread failed");
      return;
    }
    std::atexit(FinalizeAtExit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    init_status = absl::FailedPreconditionError(absl::StrCat(
        "the MPI library provides thread level ", provided,
        ", distkit needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"));
    return;
  }
  // Errors come back as codes, never abort the job from inside a call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

absl::Status EnsureMpi() {
  absl::call_once(init_once, InitializeMpi);
  return init_status;
}

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, len);
}

// ---- Types and reductions ------------------------------------------------

// The native MPI type of `dtype`, or MPI_DATATYPE_NULL (half types, bool).
MPI_Datatype NativeType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op NativeOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:  // sum, then divide
      return MPI_SUM;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kBand:
      return MPI_BAND;
    case ReduceOp::kBor:
      return MPI_BOR;
    case ReduceOp::kBxor:
      return MPI_BXOR;
  }
  return MPI_OP_NULL;
}

// For the types MPI lacks (float16, bfloat16, bool): a contiguous byte type
// of the element's size and a user op per (dtype, op) running distkit's own
// kernel (the same rounding as the other backends).
constexpr int kNumDtypes = 9;
constexpr int kNumOps = 8;
MPI_Op user_ops[kNumDtypes][kNumOps];
MPI_Datatype byte_types[9];
absl::Mutex user_mu;

template <int D, int O>
void UserOp(void* in, void* inout, int* len, MPI_Datatype*) {
  static const ReduceFn fn = *GetReduceFn(static_cast<DataType>(D),
                                          O == static_cast<int>(ReduceOp::kMean)
                                              ? ReduceOp::kSum
                                              : static_cast<ReduceOp>(O));
  fn(inout, inout, in, *len);
}

template <int D, int... O>
void FillOps(std::integer_sequence<int, O...>, MPI_User_function** table) {
  ((table[O] = &UserOp<D, O>), ...);
}

MPI_User_function* UserFunction(DataType dtype, ReduceOp op) {
  static MPI_User_function* table[kNumDtypes][kNumOps] = {};
  static absl::once_flag once;
  absl::call_once(once, [] {
    using Ops = std::make_integer_sequence<int, kNumOps>;
    FillOps<0>(Ops(), table[0]);
    FillOps<1>(Ops(), table[1]);
    FillOps<8>(Ops(), table[8]);
  });
  return table[static_cast<int>(dtype)][static_cast<int>(op)];
}

struct TypeAndOp {
  MPI_Datatype type;
  MPI_Op op;
};

absl::StatusOr<TypeAndOp> Lookup(DataType dtype, ReduceOp op) {
  DK_RETURN_IF_ERROR(CheckReduceOpSupported(op, dtype));
  MPI_Datatype native = NativeType(dtype);
  if (native != MPI_DATATYPE_NULL) return TypeAndOp{native, NativeOp(op)};
  absl::MutexLock lock(&user_mu);
  const int d = static_cast<int>(dtype), o = static_cast<int>(op);
  const size_t elem = ElementSize(dtype);
  if (byte_types[elem] == MPI_DATATYPE_NULL || byte_types[elem] == 0) {
    MPI_Type_contiguous(static_cast<int>(elem), MPI_BYTE, &byte_types[elem]);
    MPI_Type_commit(&byte_types[elem]);
  }
  if (user_ops[d][o] == MPI_OP_NULL || user_ops[d][o] == 0) {
    MPI_User_function* fn = UserFunction(dtype, op);
    if (fn == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("mpi: no reduction for ", DataTypeName(dtype)));
    }
    MPI_Op_create(fn, /*commute=*/1, &user_ops[d][o]);
  }
  return TypeAndOp{byte_types[elem], user_ops[d][o]};
}

absl::StatusOr<int> Count(int64_t n, const OpContext& ctx) {
  if (n > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx.Describe(), ": ", n, " elements exceed MPI's int count"));
  }
  return static_cast<int>(n);
}

// Moves bytes of `t` as units of its element size (counts stay small).
MPI_Datatype ElementType(DataType dtype) {
  MPI_Datatype native = NativeType(dtype);
  if (native != MPI_DATATYPE_NULL) return native;
  return ElementSize(dtype) == 2 ? MPI_UINT16_T : MPI_UINT8_T;
}

struct SendHeader {
  int32_t dtype;
  int32_t pad;
  int64_t count;
};

}  // namespace

// ---- Construction --------------------------------------------------------

MpiBackend::MpiBackend(MPI_Comm comm, int rank, int size)
    : comm_(comm), rank_(rank), size_(size) {}

MpiBackend::~MpiBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) {
    absl::MutexLock lock(&mu_);
    if (poison_.ok()) MPI_Comm_free(&comm_);
  }
}

absl::StatusOr<std::pair<int, int>> MpiBackend::WorldRankAndSize() {
  DK_RETURN_IF_ERROR(EnsureMpi());
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::make_pair(rank, size);
}

absl::StatusOr<std::unique_ptr<MpiBackend>> MpiBackend::CreateWorld(int rank,
                                                                    int size) {
  DK_ASSIGN_OR_RETURN(auto world, WorldRankAndSize());
  if (world.first != rank || world.second != size) {
    return absl::FailedPreconditionError(
        absl::StrCat("mpi: the launcher says rank ", rank, " of ", size,
                     " but MPI_COMM_WORLD says rank ", world.first, " of ",
                     world.second, " (start the job with mpirun)"));
  }
  return std::unique_ptr<MpiBackend>(
      new MpiBackend(MPI_COMM_WORLD, rank, size));
}

absl::StatusOr<std::unique_ptr<Backend>> MpiBackend::Split(
    const OpContext& ctx, const std::vector<int>& parent_ranks) {
  DK_RETURN_IF_ERROR(Usable(ctx));
  int key = -1;
  for (size_t i = 0; i < parent_ranks.size(); ++i)
    if (parent_ranks[i] == rank_) key = static_cast<int>(i);
  MPI_Comm comm = MPI_COMM_NULL;
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Comm_split(comm_, key >= 0 ? 0 : MPI_UNDEFINED,
                                  std::max(key, 0), &comm)),
            "MPI_Comm_split"));
  if (key < 0) return std::unique_ptr<Backend>();
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int size = 0;
  MPI_Comm_size(comm, &size);
  return std::unique_ptr<Backend>(new MpiBackend(comm, key, size));
}

// ---- Failure handling ----------------------------------------------------

absl::Status MpiBackend::Usable(const OpContext& ctx) {
  absl::MutexLock lock(&mu_);
  if (!poison_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx.Describe(), ": the group is unusable after an earlier error (",
        poison_.message(), "); destroy it and create a new one"));
  }
  return absl::OkStatus();
}

absl::Status MpiBackend::Poison(absl::Status status) {
  any_poisoned = true;
  absl::MutexLock lock(&mu_);
  if (poison_.ok()) poison_ = status;
  return status;
}

absl::Status MpiBackend::Check(const OpContext& ctx, int rc, const char* call) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  return Poison(absl::UnavailableError(absl::StrCat(
      ctx.Describe(), " (rank ", rank_, "): ", call, ": ", MpiError(rc))));
}

void MpiBackend::Abort() { aborted_ = true; }

absl::Status MpiBackend::Complete(const OpContext& ctx,
                                  std::vector<MPI_Request>& requests) {
  const absl::Time deadline = absl::Now() + ctx.timeout;
  int spins = 0;
  while (true) {
    int done = 0;
    const int rc =
        DK_MPI(MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                           &done, MPI_STATUSES_IGNORE));
    if (rc != MPI_SUCCESS) return Check(ctx, rc, "MPI_Testall");
    if (done) return absl::OkStatus();
    if (aborted_) {
      return Poison(absl::CancelledError(
          absl::StrCat(ctx.Describe(), ": the group was aborted")));
    }
    if ((++spins & 1023) == 0 && absl::Now() > deadline) {
      return Poison(absl::DeadlineExceededError(absl::StrCat(
          ctx.Describe(), " (rank ", rank_, "): timed out after ",
          absl::FormatDuration(ctx.timeout), " waiting for peers")));
    }
    sched_yield();  // ranks may share cores
  }
}

absl::Status MpiBackend::Complete(const OpContext& ctx, MPI_Request request) {
  std::vector<MPI_Request> requests = {request};
  return Complete(ctx, requests);
}

absl::Status MpiBackend::Agree(const OpContext& ctx, const OpSignature& sig) {
  DK_RETURN_IF_ERROR(Usable(ctx));
  std::vector<OpSignature> all(size_);
  MPI_Request req;
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Iallgather(&sig, sizeof(sig), MPI_BYTE, all.data(),
                                  sizeof(sig), MPI_BYTE, comm_, &req)),
            "MPI_Iallgather"));
  DK_RETURN_IF_ERROR(Complete(ctx, req));
  return CheckAgreement(ctx, all);
}

// ---- Collectives ---------------------------------------------------------

absl::Status MpiBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                   ReduceOp op) {
  DK_ASSIGN_OR_RETURN(TypeAndOp t, Lookup(data.dtype(), op));
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  DK_RETURN_IF_ERROR(
      Agree(ctx, MakeSignature(ctx, OpCode::kAllReduce, &data, data.numel(), -1,
                               static_cast<int>(op))));
  MPI_Request req;
  DK_RETURN_IF_ERROR(Check(ctx,
                           DK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data.data(), n,
                                                 t.type, t.op, comm_, &req)),
                           "MPI_Iallreduce"));
  DK_RETURN_IF_ERROR(Complete(ctx, req));
  if (op == ReduceOp::kMean)
    DivideBySize(data.data(), data.dtype(), data.numel(), size_);
  return absl::OkStatus();
}

absl::Status MpiBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                   int root) {
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  DK_RETURN_IF_ERROR(Agree(
      ctx, MakeSignature(ctx, OpCode::kBroadcast, &data, data.numel(), root)));
  MPI_Request req;
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Ibcast(data.data(), n, ElementType(data.dtype()), root,
                              comm_, &req)),
            "MPI_Ibcast"));
  return Complete(ctx, req);
}

absl::Status MpiBackend::Reduce(const OpContext& ctx, TensorRef data,
                                ReduceOp op, int root) {
  DK_ASSIGN_OR_RETURN(TypeAndOp t, Lookup(data.dtype(), op));
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  DK_RETURN_IF_ERROR(
      Agree(ctx, MakeSignature(ctx, OpCode::kReduce, &data, data.numel(), root,
                               static_cast<int>(op))));
  MPI_Request req;
  // The root reduces in place; the others' data stays unchanged.
  const void* send = rank_ == root ? MPI_IN_PLACE : data.data();
  void* recv = rank_ == root ? data.data() : nullptr;
  DK_RETURN_IF_ERROR(Check(
      ctx, DK_MPI(MPI_Ireduce(send, recv, n, t.type, t.op, root, comm_, &req)),
      "MPI_Ireduce"));
  DK_RETURN_IF_ERROR(Complete(ctx, req));
  if (op == ReduceOp::kMean && rank_ == root)
    DivideBySize(data.data(), data.dtype(), data.numel(), size_);
  return absl::OkStatus();
}

absl::Status MpiBackend::AllGather(const OpContext& ctx, TensorRef input,
                                   TensorRef output) {
  DK_ASSIGN_OR_RETURN(int n, Count(input.numel(), ctx));
  DK_RETURN_IF_ERROR(Agree(
      ctx, MakeSignature(ctx, OpCode::kAllGather, &input, input.numel())));
  const MPI_Datatype type = ElementType(input.dtype());
  MPI_Request req;
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Iallgather(input.data(), n, type, output.data(), n, type,
                                  comm_, &req)),
            "MPI_Iallgather"));
  return Complete(ctx, req);
}

absl::Status MpiBackend::Gather(const OpContext& ctx, TensorRef input,
                                TensorRef output, int root) {
  DK_ASSIGN_OR_RETURN(int n, Count(input.numel(), ctx));
  DK_RETURN_IF_ERROR(Agree(
      ctx, MakeSignature(ctx, OpCode::kGather, &input, input.numel(), root)));
  const MPI_Datatype type = ElementType(input.dtype());
  MPI_Request req;
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Igather(input.data(), n, type,
                               rank_ == root ? output.data() : nullptr, n, type,
                               root, comm_, &req)),
            "MPI_Igather"));
  return Complete(ctx, req);
}

absl::Status MpiBackend::Scatter(const OpContext& ctx, TensorRef input,
                                 TensorRef output, int root) {
  DK_ASSIGN_OR_RETURN(int n, Count(output.numel(), ctx));
  DK_RETURN_IF_ERROR(Agree(ctx, MakeSignature(ctx, OpCode::kScatter, &output,
                                              output.numel(), root)));
  const MPI_Datatype type = ElementType(output.dtype());
  MPI_Request req;
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Iscatter(rank_ == root ? input.data() : nullptr, n, type,
                                output.data(), n, type, root, comm_, &req)),
            "MPI_Iscatter"));
  return Complete(ctx, req);
}

absl::Status MpiBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                       TensorRef output, ReduceOp op) {
  DK_ASSIGN_OR_RETURN(TypeAndOp t, Lookup(output.dtype(), op));
  DK_ASSIGN_OR_RETURN(int n, Count(output.numel(), ctx));
  DK_RETURN_IF_ERROR(
      Agree(ctx, MakeSignature(ctx, OpCode::kReduceScatter, &output,
                               output.numel(), -1, static_cast<int>(op))));
  MPI_Request req;
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Ireduce_scatter_block(input.data(), output.data(), n,
                                             t.type, t.op, comm_, &req)),
            "MPI_Ireduce_scatter_block"));
  DK_RETURN_IF_ERROR(Complete(ctx, req));
  if (op == ReduceOp::kMean)
    DivideBySize(output.data(), output.dtype(), output.numel(), size_);
  return absl::OkStatus();
}

absl::Status MpiBackend::AllToAll(const OpContext& ctx, TensorRef input,
                                  absl::Span<const int64_t> input_splits,
                                  TensorRef output,
                                  absl::Span<const int64_t> output_splits) {
  const bool uneven = !input_splits.empty() || !output_splits.empty();
  DK_RETURN_IF_ERROR(Agree(ctx, MakeSignature(ctx, OpCode::kAllToAll, &input,
                                              uneven ? -1 : input.numel())));
  const MPI_Datatype type = ElementType(input.dtype());
  MPI_Request req;
  if (!uneven) {
    DK_ASSIGN_OR_RETURN(int n, Count(input.numel() / size_, ctx));
    DK_RETURN_IF_ERROR(
        Check(ctx,
              DK_MPI(MPI_Ialltoall(input.data(), n, type, output.data(), n,
                                   type, comm_, &req)),
              "MPI_Ialltoall"));
    return Complete(ctx, req);
  }
  // The split matrix must agree before data moves: what r sends to d is what
  // d expects from r.
  std::vector<int64_t> mine(2 * size_), all(2 * size_ * size_);
  for (int r = 0; r < size_; ++r) {
    mine[r] = input_splits[r];
    mine[size_ + r] = output_splits[r];
  }
  DK_RETURN_IF_ERROR(Check(
      ctx,
      DK_MPI(MPI_Iallgather(mine.data(), 2 * size_, MPI_INT64_T, all.data(),
                            2 * size_, MPI_INT64_T, comm_, &req)),
      "MPI_Iallgather"));
  DK_RETURN_IF_ERROR(Complete(ctx, req));
  for (int src = 0; src < size_; ++src) {
    for (int dst = 0; dst < size_; ++dst) {
      const int64_t sends = all[src * 2 * size_ + dst];
      const int64_t expects = all[dst * 2 * size_ + size_ + src];
      if (sends != expects) {
        return absl::InvalidArgumentError(
            absl::StrCat(ctx.Describe(), ": rank ", src, " sends ", sends,
                         " elements to rank ", dst, ", which expects ", expects,
                         " from it (input_splits and "
                         "output_splits must match across ranks)"));
      }
    }
  }
  std::vector<int> scounts(size_), sdispls(size_), rcounts(size_),
      rdispls(size_);
  int64_t sat = 0, rat = 0;
  for (int r = 0; r < size_; ++r) {
    DK_ASSIGN_OR_RETURN(scounts[r], Count(input_splits[r], ctx));
    DK_ASSIGN_OR_RETURN(rcounts[r], Count(output_splits[r], ctx));
    DK_ASSIGN_OR_RETURN(sdispls[r], Count(sat, ctx));
    DK_ASSIGN_OR_RETURN(rdispls[r], Count(rat, ctx));
    sat += input_splits[r];
    rat += output_splits[r];
  }
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Ialltoallv(input.data(), scounts.data(), sdispls.data(),
                                  type, output.data(), rcounts.data(),
                                  rdispls.data(), type, comm_, &req)),
            "MPI_Ialltoallv"));
  return Complete(ctx, req);
}

absl::Status MpiBackend::Barrier(const OpContext& ctx) {
  // The signature exchange is an all-gather: no rank leaves it before every
  // rank has entered it.
  return Agree(ctx, MakeSignature(ctx, OpCode::kBarrier, nullptr, -1));
}

// ---- Point to point ------------------------------------------------------

namespace {
// MPI tags are at least 15 bits; a user tag t uses 2t (header) and 2t + 1.
constexpr int kMaxUserTag = 16383;
}  // namespace

absl::Status MpiBackend::Send(const OpContext& ctx, TensorRef data, int dst,
                              int tag) {
  DK_RETURN_IF_ERROR(Usable(ctx));
  if (tag < 0 || tag > kMaxUserTag) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.Describe(), ": tag ", tag, " is outside [0, ",
                     kMaxUserTag, "] (the mpi backend's range)"));
  }
  DK_ASSIGN_OR_RETURN(int n, Count(data.numel(), ctx));
  SendHeader header{static_cast<int32_t>(data.dtype()), 0, data.numel()};
  std::vector<MPI_Request> reqs(2);
  DK_RETURN_IF_ERROR(Check(ctx,
                           DK_MPI(MPI_Isend(&header, sizeof(header), MPI_BYTE,
                                            dst, 2 * tag, comm_, &reqs[0])),
                           "MPI_Isend"));
  DK_RETURN_IF_ERROR(
      Check(ctx,
            DK_MPI(MPI_Isend(data.data(), n, ElementType(data.dtype()), dst,
                             2 * tag + 1, comm_, &reqs[1])),
            "MPI_Isend"));
  return Complete(ctx, reqs);
}

absl::Status MpiBackend::Recv(const OpContext& ctx, TensorRef data, int src,
                              int tag) {
  DK_RETURN_IF_ERROR(Usable(ctx));
  if (tag < 0 || tag > kMaxUserTag) {
    return absl::InvalidArgumentError(
        absl::StrCat(ctx.Describe(), ": tag ", tag, " is outside [0, ",
                     kMaxUserTag, "] (the mpi backend's range)"));
  }
  SendHeader header{};
  MPI_Request req;
  DK_RETURN_IF_ERROR(Check(ctx,
                           DK_MPI(MPI_Irecv(&header, sizeof(header), MPI_BYTE,
                                            src, 2 * tag, comm_, &req)),
                           "MPI_Irecv"));
  DK_RETURN_IF_ERROR(Complete(ctx, req));
  const bool matches = header.dtype == static_cast<int32_t>(data.dtype()) &&
                       header.count == data.numel();
  absl::StatusOr<DataType> sent = DataTypeFromInt(header.dtype);
  const size_t sent_bytes = sent.ok() ? header.count * ElementSize(*sent) : 0;
  // Receive what was sent (into scratch when it does not match), so the
  // stream stays in step, then report the mismatch.
  std::vector<char> dropped;
  void* target = data.data();
  if (!matches) {
    dropped.resize(sent_bytes);
    target = dropped.data();
  }
  DK_ASSIGN_OR_RETURN(int nbytes, Count(static_cast<int64_t>(sent_bytes), ctx));
  DK_RETURN_IF_ERROR(Check(ctx,
                           DK_MPI(MPI_Irecv(target, nbytes, MPI_BYTE, src,
                                            2 * tag + 1, comm_, &req)),
                           "MPI_Irecv"));
  DK_RETURN_IF_ERROR(Complete(ctx, req));
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx.Describe(), ": rank ", src, " sent ",
        sent.ok() ? DataTypeName(*sent) : "?", " x", header.count, " with tag ",
        tag, " but rank ", rank_, " expected ", DataTypeName(data.dtype()),
        " x", data.numel(), "; the data was received and dropped"));
  }
  return absl::OkStatus();
}

}  // namespace distkit
