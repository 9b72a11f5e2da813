#include "cc/comm/nccl/nccl_backend.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/comm/nccl/nccl_library.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/core/cuda_library.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

constexpr absl::Duration kWatchdogPeriod = absl::Milliseconds(100);

absl::Status NcclStatus(const NcclLibrary& nccl, ncclResult_t r,
                        absl::string_view what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(what, ": ", nccl.GetErrorString(r)));
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

// What NCCL can reduce: every op on floats and integers except the bitwise
// ones, and band / bor (as min / max) on bool.
bool NcclCanReduce(ReduceOp op, DataType d) {
  if (d == DataType::kBool) {
    return op == ReduceOp::kBand || op == ReduceOp::kBor ||
           op == ReduceOp::kMin || op == ReduceOp::kMax;
  }
  return op != ReduceOp::kBand && op != ReduceOp::kBor && op != ReduceOp::kBxor;
}

// The NCCL reduction for (op, dtype), which CheckReduce accepted; mean
// arrives only for floats (NativeMean).
ncclRedOp_t NcclOp(ReduceOp op, DataType d) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
    case ReduceOp::kBand:  // bool
      return ncclMin;
    case ReduceOp::kMax:
    case ReduceOp::kBor:  // bool
      return ncclMax;
    case ReduceOp::kMean:
      return ncclAvg;
    case ReduceOp::kBxor:
      break;
  }
  return ncclSum;
}

char* At(const TensorRef& t, int64_t elements) {
  return static_cast<char*>(t.data()) + elements * ElementSize(t.dtype());
}

}  // namespace

NcclBackend::NcclBackend(const CudaLibrary* cuda, const NcclLibrary* nccl,
                         ncclComm_t comm, int rank, int size, int device)
    : cuda_(cuda),
      nccl_(nccl),
      comm_(comm),
      rank_(rank),
      size_(size),
      device_(device) {}

absl::Status NcclBackend::Init() {
  DK_RETURN_IF_ERROR(
      CudaStatus(*cuda_, cuda_->SetDevice(device_), "cudaSetDevice"));
  DK_RETURN_IF_ERROR(CudaStatus(
      *cuda_, cuda_->StreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
      "cudaStreamCreate"));
  DK_RETURN_IF_ERROR(CudaStatus(
      *cuda_, cuda_->EventCreateWithFlags(&done_, cudaEventDisableTiming),
      "cudaEventCreate"));
  watchdog_ = std::thread([this] { WatchdogLoop(); });
  return absl::OkStatus();
}

absl::Status NcclBackend::CanRun() {
  if (absl::Status s = CudaUsable(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the nccl backend needs a CUDA GPU, and none is usable on this "
        "machine (",
        s.message(), "); use backend 'gloo' for CPU tensors"));
  }
  if (absl::StatusOr<const NcclLibrary*> nccl = LoadNcclLibrary(); !nccl.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the nccl backend cannot run: ", nccl.status().message()));
  }
  return absl::OkStatus();
}

namespace {

// Every rank says whether it can run NCCL before any rank enters
// ncclCommInitRank, which waits for all ranks without a deadline: a rank
// without a GPU or libnccl then fails every rank at once, naming itself,
// instead of leaving the others blocked.
absl::Status AgreeToStart(const BackendConfig& config,
                          const absl::Status& mine) {
  DK_RETURN_IF_ERROR(config.store->Set(
      absl::StrCat("can_run/", config.rank),
      mine.ok() ? std::string("ok") : std::string(mine.message())));
  if (!mine.ok()) return mine;
  std::vector<std::string> keys;
  for (int r = 0; r < config.size; ++r) {
    keys.push_back(absl::StrCat("can_run/", r));
  }
  DK_ASSIGN_OR_RETURN(std::vector<std::string> answers,
                      config.store->MultiGetWithTimeout(keys, config.timeout));
  for (int r = 0; r < config.size; ++r) {
    if (answers[r] != "ok") {
      return absl::FailedPreconditionError(absl::StrCat(
          "the nccl backend cannot start: rank ", r, " reports: ", answers[r]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclBackend>> NcclBackend::Create(
    const BackendConfig& config) {
  DK_RETURN_IF_ERROR(AgreeToStart(config, CanRun()));
  const CudaLibrary* cuda = *LoadCudaLibrary();
  const NcclLibrary* nccl = *LoadNcclLibrary();
  const int device = config.local_rank % CudaDeviceCount();
  DK_RETURN_IF_ERROR(
      CudaStatus(*cuda, cuda->SetDevice(device), "cudaSetDevice"));
  // Rank 0's ncclUniqueId reaches the others through the group's store.
  ncclUniqueId id;
  if (config.rank == 0) {
    DK_RETURN_IF_ERROR(
        NcclStatus(*nccl, nccl->GetUniqueId(&id), "ncclGetUniqueId"));
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
      NcclStatus(*nccl, nccl->CommInitRank(&comm, config.size, id, config.rank),
                 "ncclCommInitRank"));
  std::unique_ptr<NcclBackend> b(
      new NcclBackend(cuda, nccl, comm, config.rank, config.size, device));
  DK_RETURN_IF_ERROR(b->Init());
  return b;
}

NcclBackend::~NcclBackend() {
  stop_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  cuda_->SetDevice(device_);
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_comm_) nccl_->CommDestroy(comm_);
  }
  if (done_ != nullptr) cuda_->EventDestroy(done_);
  if (stream_ != nullptr) cuda_->StreamDestroy(stream_);
}

absl::Status NcclBackend::AbortWith(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (!aborted_comm_) {
    nccl_->CommAbort(comm_);
    aborted_comm_ = true;
  }
  if (failure_.ok()) failure_ = status;
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
        if (nccl_->CommGetAsyncError(comm_, &async) == ncclSuccess &&
            async != ncclSuccess && async != ncclInProgress) {
          failure = absl::UnavailableError(absl::StrCat(
              in_flight_ ? in_flight_what_ : std::string("nccl communicator"),
              " (rank ", rank_, "): ", nccl_->GetErrorString(async),
              "; the watchdog aborted the communicator"));
        }
      }
    }
    if (!failure.ok()) AbortWith(failure).IgnoreError();
  }
}

absl::Status NcclBackend::CheckDevice(Device device) const {
  if (device == Device::Cuda(device_)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the nccl backend works on ", Device::Cuda(device_).ToString(),
      " tensors, got one on ", device.ToString()));
}

bool NcclBackend::NativeMean(DataType dtype, Device /*device*/) const {
  return IsFloat(dtype);
}

absl::Status NcclBackend::CheckReduce(ReduceOp op, DataType dtype,
                                      Device /*device*/) const {
  if (NcclCanReduce(op, dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the nccl backend cannot reduce ", DataTypeName(dtype),
                   " with ", ReduceOpName(op)));
}

absl::Status NcclBackend::CommFailure(const OpContext& ctx) {
  absl::MutexLock lock(&mu_);
  if (!aborted_comm_) return absl::OkStatus();
  return absl::Status(failure_.code(),
                      absl::StrCat(ctx.Describe(), ": ", failure_.message()));
}

absl::Status NcclBackend::Run(const OpContext& ctx,
                              const std::function<ncclResult_t()>& enqueue,
                              bool grouped) {
  DK_RETURN_IF_ERROR(CommFailure(ctx));
  DK_RETURN_IF_ERROR(
      CudaStatus(*cuda_, cuda_->SetDevice(device_), "cudaSetDevice"));
  // Work the caller queued on the legacy default stream comes first.
  cudaEvent_t ready;
  DK_RETURN_IF_ERROR(CudaStatus(
      *cuda_, cuda_->EventCreateWithFlags(&ready, cudaEventDisableTiming),
      "cudaEventCreate"));
  cuda_->EventRecord(ready, cudaStreamLegacy);
  cuda_->StreamWaitEvent(stream_, ready, 0);
  cuda_->EventDestroy(ready);
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
  if (grouped) nccl_->GroupStart();
  ncclResult_t r = enqueue();
  if (grouped) {
    const ncclResult_t g = nccl_->GroupEnd();
    if (r == ncclSuccess) r = g;
  }
  if (r != ncclSuccess) {
    return done(AbortWith(absl::UnavailableError(absl::StrCat(
        ctx.Describe(), " (rank ", rank_, "): ", nccl_->GetErrorString(r)))));
  }
  cuda_->EventRecord(done_, stream_);
  while (true) {
    const cudaError_t e = cuda_->EventQuery(done_);
    if (e == cudaSuccess) return done(absl::OkStatus());
    if (e != cudaErrorNotReady) {
      return done(AbortWith(absl::InternalError(
          absl::StrCat(ctx.Describe(), ": ", cuda_->GetErrorString(e)))));
    }
    if (absl::Status failed = CommFailure(ctx); !failed.ok()) {
      return done(failed);
    }
    absl::SleepFor(absl::Microseconds(20));
  }
}

absl::StatusOr<std::unique_ptr<Backend>> NcclBackend::Split(
    const OpContext& ctx, const std::vector<int>& parent_ranks) {
  DK_RETURN_IF_ERROR(CommFailure(ctx));
  int key = -1;
  for (size_t i = 0; i < parent_ranks.size(); ++i)
    if (parent_ranks[i] == rank_) key = static_cast<int>(i);
  DK_RETURN_IF_ERROR(
      CudaStatus(*cuda_, cuda_->SetDevice(device_), "cudaSetDevice"));
  ncclComm_t comm = nullptr;
  DK_RETURN_IF_ERROR(
      NcclStatus(*nccl_,
                 nccl_->CommSplit(comm_, key >= 0 ? 0 : NCCL_SPLIT_NOCOLOR,
                                  std::max(key, 0), &comm, nullptr),
                 "ncclCommSplit"));
  if (key < 0) return std::unique_ptr<Backend>();
  std::unique_ptr<NcclBackend> b(new NcclBackend(
      cuda_, nccl_, comm, key, static_cast<int>(parent_ranks.size()), device_));
  DK_RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<Backend>(std::move(b));
}

// ---- The contract's metadata ---------------------------------------------

absl::Status NcclBackend::AllGatherHost(const OpContext& ctx, const void* in,
                                        size_t bytes, void* out) {
  // Staged through device memory kept between calls: one copy in, one
  // ncclAllGather, one copy out.
  const size_t need = bytes * (size_ + 1);
  if (host_exchange_bytes_ < need) {
    DK_ASSIGN_OR_RETURN(host_exchange_,
                        DeviceBuffer::Allocate(Device::Cuda(device_), need));
    host_exchange_bytes_ = need;
  }
  char* mine = static_cast<char*>(host_exchange_.data());
  char* all = mine + bytes;
  DK_RETURN_IF_ERROR(
      CopyBytes(mine, Device::Cuda(device_), in, Device::Cpu(), bytes));
  DK_RETURN_IF_ERROR(Run(ctx, [&] {
    return nccl_->AllGather(mine, all, bytes, ncclUint8, comm_, stream_);
  }));
  return CopyBytes(out, Device::Cpu(), all, Device::Cuda(device_),
                   bytes * size_);
}

// ---- Collectives ---------------------------------------------------------

absl::Status NcclBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                    ReduceOp op) {
  return Run(ctx, [&] {
    return nccl_->AllReduce(data.data(), data.data(), data.numel(),
                            NcclType(data.dtype()), NcclOp(op, data.dtype()),
                            comm_, stream_);
  });
}

absl::Status NcclBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                    int root) {
  return Run(ctx, [&] {
    return nccl_->Broadcast(data.data(), data.data(), data.numel(),
                            NcclType(data.dtype()), root, comm_, stream_);
  });
}

absl::Status NcclBackend::Reduce(const OpContext& ctx, TensorRef data,
                                 ReduceOp op, int root) {
  return Run(ctx, [&] {
    return nccl_->Reduce(data.data(), data.data(), data.numel(),
                         NcclType(data.dtype()), NcclOp(op, data.dtype()), root,
                         comm_, stream_);
  });
}

absl::Status NcclBackend::AllGather(const OpContext& ctx, TensorRef input,
                                    TensorRef output) {
  return Run(ctx, [&] {
    return nccl_->AllGather(input.data(), output.data(), input.numel(),
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
              cuda_->MemcpyAsync(dst, input.data(), input.nbytes(),
                                 cudaMemcpyDeviceToDevice, stream_);
              continue;
            }
            const ncclResult_t res =
                nccl_->Recv(dst, input.numel(), t, r, comm_, stream_);
            if (res != ncclSuccess) return res;
          }
          return ncclSuccess;
        }
        return nccl_->Send(input.data(), input.numel(), t, root, comm_,
                           stream_);
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
              cuda_->MemcpyAsync(output.data(), src, output.nbytes(),
                                 cudaMemcpyDeviceToDevice, stream_);
              continue;
            }
            const ncclResult_t res =
                nccl_->Send(src, output.numel(), t, r, comm_, stream_);
            if (res != ncclSuccess) return res;
          }
          return ncclSuccess;
        }
        return nccl_->Recv(output.data(), output.numel(), t, root, comm_,
                           stream_);
      },
      /*grouped=*/true);
}

absl::Status NcclBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                        TensorRef output, ReduceOp op) {
  return Run(ctx, [&] {
    return nccl_->ReduceScatter(input.data(), output.data(), output.numel(),
                                NcclType(output.dtype()),
                                NcclOp(op, output.dtype()), comm_, stream_);
  });
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
  return Run(
      ctx,
      [&]() -> ncclResult_t {
        const ncclDataType_t t = NcclType(input.dtype());
        int64_t sat = 0, rat = 0;
        for (int r = 0; r < size_; ++r) {
          ncclResult_t res =
              nccl_->Send(At(input, sat), in[r], t, r, comm_, stream_);
          if (res != ncclSuccess) return res;
          res = nccl_->Recv(At(output, rat), out[r], t, r, comm_, stream_);
          if (res != ncclSuccess) return res;
          sat += in[r];
          rat += out[r];
        }
        return ncclSuccess;
      },
      /*grouped=*/true);
}

// ---- Point to point ------------------------------------------------------

// NCCL has no tags: messages between a pair arrive in order, which keeps the
// contract's header ahead of its data. Host buffers (the header) are staged.
absl::Status NcclBackend::Send(const OpContext& ctx, TensorRef data, int dst,
                               int /*tag*/) {
  DeviceBuffer staged;
  const void* bytes = data.data();
  if (data.device().is_cpu() && data.nbytes() > 0) {
    DK_ASSIGN_OR_RETURN(
        staged, DeviceBuffer::Allocate(Device::Cuda(device_), data.nbytes()));
    DK_RETURN_IF_ERROR(CopyBytes(staged.data(), Device::Cuda(device_),
                                 data.data(), Device::Cpu(), data.nbytes()));
    bytes = staged.data();
  }
  return Run(ctx, [&] {
    return nccl_->Send(bytes, data.nbytes(), ncclUint8, dst, comm_, stream_);
  });
}

absl::Status NcclBackend::Recv(const OpContext& ctx, TensorRef data, int src,
                               int /*tag*/) {
  DeviceBuffer staged;
  void* bytes = data.data();
  if (data.device().is_cpu() && data.nbytes() > 0) {
    DK_ASSIGN_OR_RETURN(
        staged, DeviceBuffer::Allocate(Device::Cuda(device_), data.nbytes()));
    bytes = staged.data();
  }
  DK_RETURN_IF_ERROR(Run(ctx, [&] {
    return nccl_->Recv(bytes, data.nbytes(), ncclUint8, src, comm_, stream_);
  }));
  if (staged.data() == nullptr) return absl::OkStatus();
  return CopyBytes(data.data(), Device::Cpu(), staged.data(),
                   Device::Cuda(device_), data.nbytes());
}

}  // namespace distkit
