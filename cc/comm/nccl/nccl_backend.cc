#include "cc/comm/nccl/nccl_backend.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

constexpr absl::Duration kWatchdogPeriod = absl::Milliseconds(100);

absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

absl::Status NcclStatus(ncclResult_t r, absl::string_view what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

ncclDataType_t NcclType(DataType d) {
  switch (d) {
    case DataType::kFloat16:
      return ncclHalf;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat;
    case DataType::kFloat64:
      return ncclDouble;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
    case DataType::kBool:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclUint8;
}

bool IsFloat(DataType d) {
  return d == DataType::kFloat16 || d == DataType::kBFloat16 ||
         d == DataType::kFloat32 || d == DataType::kFloat64;
}

// The NCCL reduction for (op, dtype), or INVALID_ARGUMENT for what NCCL cannot
// express. Integer mean is a sum here (divided afterwards).
absl::StatusOr<ncclRedOp_t> NcclOp(ReduceOp op, DataType d,
                                   const OpContext& ctx) {
  DK_RETURN_IF_ERROR(CheckReduceOpSupported(op, d));
  if (d == DataType::kBool) {
    if (op == ReduceOp::kBand || op == ReduceOp::kMin) return ncclMin;
    if (op == ReduceOp::kBor || op == ReduceOp::kMax) return ncclMax;
  } else {
    switch (op) {
      case ReduceOp::kSum:
        return ncclSum;
      case ReduceOp::kProduct:
        return ncclProd;
      case ReduceOp::kMin:
        return ncclMin;
      case ReduceOp::kMax:
        return ncclMax;
      case ReduceOp::kMean:
        return IsFloat(d) ? ncclAvg : ncclSum;
      default:
        break;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(ctx.Describe(), ": the nccl backend cannot reduce ",
                   DataTypeName(d), " with ", ReduceOpName(op)));
}

char* At(const TensorRef& t, int64_t elements) {
  return static_cast<char*>(t.data()) + elements * ElementSize(t.dtype());
}

}  // namespace

NcclBackend::NcclBackend(ncclComm_t comm, int rank, int size, int device)
    : comm_(comm), rank_(rank), size_(size), device_(device) {}

absl::Status NcclBackend::Init() {
  DK_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  DK_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                 "cudaStreamCreate"));
  DK_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming),
                 "cudaEventCreate"));
  DK_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&scratch_, 64), "cudaMalloc"));
  watchdog_ = std::thread([this] { WatchdogLoop(); });
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<NcclBackend>> NcclBackend::Create(
    const BackendConfig& config) {
  const int count = CudaDeviceCount();
  if (count <= 0) {
    return absl::FailedPreconditionError(
        "the nccl backend needs a CUDA GPU, and none is usable on this machine "
        "(use backend 'gloo' for CPU tensors)");
  }
  const int device = config.local_rank % count;
  DK_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  // Rank 0's ncclUniqueId reaches the others through the group's store.
  ncclUniqueId id;
  if (config.rank == 0) {
    DK_RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
    DK_RETURN_IF_ERROR(config.store->Set(
        "unique_id", absl::string_view(id.internal, sizeof(id.internal))));
  } else {
    DK_ASSIGN_OR_RETURN(std::string bytes,
                        config.store->Get("unique_id", config.timeout));
    if (bytes.size() != sizeof(id.internal)) {
      return absl::DataLossError("nccl: malformed ncclUniqueId in the store");
    }
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  ncclComm_t comm;
  DK_RETURN_IF_ERROR(
      NcclStatus(ncclCommInitRank(&comm, config.size, id, config.rank),
                 "ncclCommInitRank"));
  std::unique_ptr<NcclBackend> b(
      new NcclBackend(comm, config.rank, config.size, device));
  DK_RETURN_IF_ERROR(b->Init());
  return b;
}

NcclBackend::~NcclBackend() {
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  cudaSetDevice(device_);
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_comm_) ncclCommDestroy(comm_);
  }
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status NcclBackend::CheckDevice(Device device) const {
  if (device == Device::Cuda(device_)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the nccl backend works on ", Device::Cuda(device_).ToString(),
      " tensors, got one on ", device.ToString()));
}

absl::Status NcclBackend::AbortWith(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (!aborted_comm_) {
    ncclCommAbort(comm_);
    aborted_comm_ = true;
  }
  if (poison_.ok()) poison_ = status;
  return status;
}

void NcclBackend::Abort() {
  AbortWith(absl::CancelledError("the group was aborted")).IgnoreError();
}

void NcclBackend::WatchdogLoop() {
  while (!stop_) {
    absl::SleepFor(kWatchdogPeriod);
    absl::Status failure;
    {
      absl::MutexLock lock(&mu_);
      if (aborted_comm_) continue;
      if (in_flight_ && absl::Now() > deadline_) {
        failure = absl::DeadlineExceededError(absl::StrCat(
            in_flight_what_, " (rank ", rank_,
            "): timed out; the watchdog aborted the communicator"));
      } else {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress) {
          failure = absl::UnavailableError(absl::StrCat(
              in_flight_ ? in_flight_what_ : std::string("nccl communicator"),
              " (rank ", rank_, "): ", ncclGetErrorString(async),
              "; the watchdog aborted the communicator"));
        }
      }
    }
    if (!failure.ok()) AbortWith(failure).IgnoreError();
  }
}

absl::Status NcclBackend::Usable(const OpContext& ctx) {
  absl::MutexLock lock(&mu_);
  if (!poison_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        ctx.Describe(), ": the group is unusable after an earlier error (",
        poison_.message(), "); destroy it and create a new one"));
  }
  return absl::OkStatus();
}

absl::Status NcclBackend::Run(const OpContext& ctx,
                              const std::function<ncclResult_t()>& enqueue,
                              bool grouped) {
  DK_RETURN_IF_ERROR(Usable(ctx));
  DK_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  // Work the caller queued on the legacy default stream comes first.
  cudaEvent_t ready;
  DK_RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                 "cudaEventCreate"));
  cudaEventRecord(ready, cudaStreamLegacy);
  cudaStreamWaitEvent(stream_, ready, 0);
  cudaEventDestroy(ready);
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = true;
    deadline_ = absl::Now() + ctx.timeout;
    in_flight_what_ = ctx.Describe();
  }
  auto done = [&](absl::Status s) {
    absl::MutexLock lock(&mu_);
    in_flight_ = false;
    return s;
  };
  if (grouped) ncclGroupStart();
  ncclResult_t r = enqueue();
  if (grouped) {
    const ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess) r = g;
  }
  if (r != ncclSuccess) {
    return done(AbortWith(absl::UnavailableError(absl::StrCat(
        ctx.Describe(), " (rank ", rank_, "): ", ncclGetErrorString(r)))));
  }
  cudaEventRecord(done_, stream_);
  while (true) {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) return done(absl::OkStatus());
    if (e != cudaErrorNotReady) {
      return done(AbortWith(absl::InternalError(
          absl::StrCat(ctx.Describe(), ": ", cudaGetErrorString(e)))));
    }
    {
      absl::MutexLock lock(&mu_);
      if (!poison_.ok()) {
        in_flight_ = false;
        return absl::Status(poison_.code(), absl::StrCat(ctx.Describe(), ": ",
                                                         poison_.message()));
      }
    }
    absl::SleepFor(absl::Microseconds(20));
  }
}

absl::StatusOr<std::unique_ptr<Backend>> NcclBackend::Split(
    const OpContext& ctx, const std::vector<int>& parent_ranks) {
  DK_RETURN_IF_ERROR(Usable(ctx));
  int key = -1;
  for (size_t i = 0; i < parent_ranks.size(); ++i)
    if (parent_ranks[i] == rank_) key = static_cast<int>(i);
  DK_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  ncclComm_t comm = nullptr;
  DK_RETURN_IF_ERROR(
      NcclStatus(ncclCommSplit(comm_, key >= 0 ? 0 : NCCL_SPLIT_NOCOLOR,
                               std::max(key, 0), &comm, nullptr),
                 "ncclCommSplit"));
  if (key < 0) return std::unique_ptr<Backend>();
  std::unique_ptr<NcclBackend> b(new NcclBackend(
      comm, key, static_cast<int>(parent_ranks.size()), device_));
  DK_RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<Backend>(std::move(b));
}

// ---- Collectives ---------------------------------------------------------

absl::Status NcclBackend::TruncatingMean(TensorRef t) {
  // NCCL averages floats itself (ncclAvg); integers were summed, and their
  // mean truncates toward zero as mmengine's: divide on the host.
  if (IsFloat(t.dtype())) return absl::OkStatus();
  std::vector<char> host(t.nbytes());
  DK_RETURN_IF_ERROR(CopyBytes(host.data(), Device::Cpu(), t.data(),
                               Device::Cuda(device_), t.nbytes()));
  DivideBySize(host.data(), t.dtype(), t.numel(), size_);
  return CopyBytes(t.data(), Device::Cuda(device_), host.data(), Device::Cpu(),
                   t.nbytes());
}

absl::Status NcclBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                    ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ncclRedOp_t nop, NcclOp(op, data.dtype(), ctx));
  DK_RETURN_IF_ERROR(Run(ctx, [&] {
    return ncclAllReduce(data.data(), data.data(), data.numel(),
                         NcclType(data.dtype()), nop, comm_, stream_);
  }));
  if (op == ReduceOp::kMean) return TruncatingMean(data);
  return absl::OkStatus();
}

absl::Status NcclBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                    int root) {
  return Run(ctx, [&] {
    return ncclBroadcast(data.data(), data.data(), data.numel(),
                         NcclType(data.dtype()), root, comm_, stream_);
  });
}

absl::Status NcclBackend::Reduce(const OpContext& ctx, TensorRef data,
                                 ReduceOp op, int root) {
  DK_ASSIGN_OR_RETURN(ncclRedOp_t nop, NcclOp(op, data.dtype(), ctx));
  DK_RETURN_IF_ERROR(Run(ctx, [&] {
    return ncclReduce(data.data(), data.data(), data.numel(),
                      NcclType(data.dtype()), nop, root, comm_, stream_);
  }));
  if (op == ReduceOp::kMean && rank_ == root) return TruncatingMean(data);
  return absl::OkStatus();
}

absl::Status NcclBackend::AllGather(const OpContext& ctx, TensorRef input,
                                    TensorRef output) {
  return Run(ctx, [&] {
    return ncclAllGather(input.data(), output.data(), input.numel(),
                         NcclType(input.dtype()), comm_, stream_);
  });
}

absl::Status NcclBackend::Gather(const OpContext& ctx, TensorRef input,
                                 TensorRef output, int root) {
  // Grouped sends to the root; the root receives every part.
  return Run(
      ctx,
      [&]() -> ncclResult_t {
        const ncclDataType_t t = NcclType(input.dtype());
        if (rank_ == root) {
          for (int r = 0; r < size_; ++r) {
            char* dst = At(output, r * input.numel());
            if (r == rank_) {
              cudaMemcpyAsync(dst, input.data(), input.nbytes(),
                              cudaMemcpyDeviceToDevice, stream_);
              continue;
            }
            const ncclResult_t res =
                ncclRecv(dst, input.numel(), t, r, comm_, stream_);
            if (res != ncclSuccess) return res;
          }
          return ncclSuccess;
        }
        return ncclSend(input.data(), input.numel(), t, root, comm_, stream_);
      },
      /*grouped=*/true);
}

absl::Status NcclBackend::Scatter(const OpContext& ctx, TensorRef input,
                                  TensorRef output, int root) {
  return Run(
      ctx,
      [&]() -> ncclResult_t {
        const ncclDataType_t t = NcclType(output.dtype());
        if (rank_ == root) {
          for (int r = 0; r < size_; ++r) {
            const char* src = At(input, r * output.numel());
            if (r == rank_) {
              cudaMemcpyAsync(output.data(), src, output.nbytes(),
                              cudaMemcpyDeviceToDevice, stream_);
              continue;
            }
            const ncclResult_t res =
                ncclSend(src, output.numel(), t, r, comm_, stream_);
            if (res != ncclSuccess) return res;
          }
          return ncclSuccess;
        }
        return ncclRecv(output.data(), output.numel(), t, root, comm_, stream_);
      },
      /*grouped=*/true);
}

absl::Status NcclBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                        TensorRef output, ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ncclRedOp_t nop, NcclOp(op, output.dtype(), ctx));
  DK_RETURN_IF_ERROR(Run(ctx, [&] {
    return ncclReduceScatter(input.data(), output.data(), output.numel(),
                             NcclType(output.dtype()), nop, comm_, stream_);
  }));
  if (op == ReduceOp::kMean) return TruncatingMean(output);
  return absl::OkStatus();
}

absl::Status NcclBackend::AllToAll(const OpContext& ctx, TensorRef input,
                                   absl::Span<const int64_t> input_splits,
                                   TensorRef output,
                                   absl::Span<const int64_t> output_splits) {
  std::vector<int64_t> in(size_), out(size_);
  for (int r = 0; r < size_; ++r) {
    in[r] = input_splits.empty() ? input.numel() / size_ : input_splits[r];
    out[r] = output_splits.empty() ? output.numel() / size_ : output_splits[r];
  }
  if (!input_splits.empty() || !output_splits.empty()) {
    // The split matrix must agree before data moves (an allgather of it).
    std::vector<int64_t> mine(2 * size_), all(2 * size_ * size_);
    for (int r = 0; r < size_; ++r) {
      mine[r] = in[r];
      mine[size_ + r] = out[r];
    }
    DK_ASSIGN_OR_RETURN(DeviceBuffer dev,
                        DeviceBuffer::Allocate(Device::Cuda(device_),
                                               (mine.size() + all.size()) * 8));
    int64_t* d = static_cast<int64_t*>(dev.data());
    DK_RETURN_IF_ERROR(CopyBytes(d, Device::Cuda(device_), mine.data(),
                                 Device::Cpu(), mine.size() * 8));
    DK_RETURN_IF_ERROR(Run(ctx, [&] {
      return ncclAllGather(d, d + mine.size(), mine.size(), ncclInt64, comm_,
                           stream_);
    }));
    DK_RETURN_IF_ERROR(CopyBytes(all.data(), Device::Cpu(), d + mine.size(),
                                 Device::Cuda(device_), all.size() * 8));
    for (int src = 0; src < size_; ++src) {
      for (int dst = 0; dst < size_; ++dst) {
        const int64_t sends = all[src * 2 * size_ + dst];
        const int64_t expects = all[dst * 2 * size_ + size_ + src];
        if (sends != expects) {
          return absl::InvalidArgumentError(absl::StrCat(
              ctx.Describe(), ": rank ", src, " sends ", sends,
              " elements to rank ", dst, ", which expects ", expects,
              " from it (input_splits and output_splits must match across "
              "ranks)"));
        }
      }
    }
  }
  return Run(
      ctx,
      [&]() -> ncclResult_t {
        const ncclDataType_t t = NcclType(input.dtype());
        int64_t sat = 0, rat = 0;
        for (int r = 0; r < size_; ++r) {
          ncclResult_t res =
              ncclSend(At(input, sat), in[r], t, r, comm_, stream_);
          if (res != ncclSuccess) return res;
          res = ncclRecv(At(output, rat), out[r], t, r, comm_, stream_);
          if (res != ncclSuccess) return res;
          sat += in[r];
          rat += out[r];
        }
        return ncclSuccess;
      },
      /*grouped=*/true);
}

absl::Status NcclBackend::Barrier(const OpContext& ctx) {
  return Run(ctx, [&] {
    return ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_,
                         stream_);
  });
}

// NCCL has no tags: messages between a pair arrive in order. A 16-byte header
// (dtype, count) goes first, so a mismatched receive is an error, not a hang.
absl::Status NcclBackend::Send(const OpContext& ctx, TensorRef data, int dst,
                               int /*tag*/) {
  const int64_t header[2] = {static_cast<int64_t>(data.dtype()), data.numel()};
  DK_ASSIGN_OR_RETURN(DeviceBuffer h,
                      DeviceBuffer::Allocate(Device::Cuda(device_), 16));
  DK_RETURN_IF_ERROR(
      CopyBytes(h.data(), Device::Cuda(device_), header, Device::Cpu(), 16));
  return Run(
      ctx,
      [&]() -> ncclResult_t {
        ncclResult_t r = ncclSend(h.data(), 2, ncclInt64, dst, comm_, stream_);
        if (r != ncclSuccess) return r;
        return ncclSend(data.data(), data.nbytes(), ncclUint8, dst, comm_,
                        stream_);
      },
      /*grouped=*/true);
}

absl::Status NcclBackend::Recv(const OpContext& ctx, TensorRef data, int src,
                               int /*tag*/) {
  DK_ASSIGN_OR_RETURN(DeviceBuffer h,
                      DeviceBuffer::Allocate(Device::Cuda(device_), 16));
  DK_RETURN_IF_ERROR(Run(ctx, [&] {
    return ncclRecv(h.data(), 2, ncclInt64, src, comm_, stream_);
  }));
  int64_t header[2];
  DK_RETURN_IF_ERROR(
      CopyBytes(header, Device::Cpu(), h.data(), Device::Cuda(device_), 16));
  absl::StatusOr<DataType> sent = DataTypeFromInt(static_cast<int>(header[0]));
  const size_t sent_bytes = sent.ok() ? header[1] * ElementSize(*sent) : 0;
  const bool matches =
      sent.ok() && *sent == data.dtype() && header[1] == data.numel();
  DeviceBuffer dropped;
  void* target = data.data();
  if (!matches) {
    DK_ASSIGN_OR_RETURN(
        dropped, DeviceBuffer::Allocate(Device::Cuda(device_), sent_bytes));
    target = dropped.data();
  }
  DK_RETURN_IF_ERROR(Run(ctx, [&] {
    return ncclRecv(target, sent_bytes, ncclUint8, src, comm_, stream_);
  }));
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat(
        ctx.Describe(), ": rank ", src, " sent ",
        sent.ok() ? DataTypeName(*sent) : "?", " x", header[1], " but rank ",
        rank_, " expected ", DataTypeName(data.dtype()), " x", data.numel(),
        "; the data was received and dropped"));
  }
  return absl::OkStatus();
}

}  // namespace distkit
