// NcclBackend runs collectives on CUDA tensors of one device (cuda:<local
// rank>) through NCCL. One communicator per group: the ncclUniqueId travels
// through the group's Store, subgroups come from ncclCommSplit. Operations
// are enqueued on the group's own CUDA stream and complete through a CUDA
// event, which the group's worker waits on, so asynchronous calls overlap
// the caller's compute.
//
// A watchdog thread aborts the communicator (ncclCommAbort) when an
// operation runs past its timeout or ncclCommGetAsyncError reports a
// failure; that operation and every later one then fail with a message
// naming op, group and sequence number (and the contract poisons the group).
// Abort() does the same from any thread.
//
// The contract's signature exchange rides on the communicator itself: 40
// bytes per rank staged through device memory and one ncclAllGather
// (AllGatherHost), before the operation's own kernels. What NCCL cannot
// express (bitwise reductions, except band/bor on bool as min/max) is refused
// by CheckReduce before anything runs; float mean is ncclAvg (NativeMean),
// integer mean a sum the contract divides.
//
// CUDA and NCCL are opened with dlopen at first use (cuda_library.h,
// nccl_library.h): a build with this backend loads on CPU-only machines,
// where it is a FAILED_PRECONDITION saying what is missing, on every rank
// before any rank blocks (Create's agreement through the store).
//
// Registered as "nccl" and, with the Gloo backend for CPU tensors,
// "cpu:gloo,cuda:nccl" (dispatch by tensor device).

#ifndef DISTKIT_CC_COMM_NCCL_NCCL_BACKEND_H_
#define DISTKIT_CC_COMM_NCCL_NCCL_BACKEND_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cc/comm/backend.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/nccl/nccl_library.h"
#include "cc/core/cuda_library.h"
#include "cc/core/device_copy.h"

namespace distkit {

class NcclBackend : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<NcclBackend>> Create(
      const BackendConfig& config);
  ~NcclBackend() override;

  // OK when this process can run NCCL (a usable GPU, libcudart and libnccl
  // loaded); else FAILED_PRECONDITION saying what is missing. Cheap after
  // the first call; used before any rank connects (CheckBackendCanRun).
  static absl::Status CanRun();

  absl::string_view name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device comm_device() const override { return Device::Cuda(device_); }
  absl::Status CheckDevice(Device device) const override;
  bool NativeMean(DataType dtype, Device device) const override;
  absl::Status CheckReduce(ReduceOp op, DataType dtype,
                           Device device) const override;
  absl::Status AllGatherHost(const OpContext& ctx, const void* in, size_t bytes,
                             void* out) override;
  bool splits_from_parent() const override { return true; }
  absl::StatusOr<std::unique_ptr<Backend>> Split(
      const OpContext& ctx, const std::vector<int>& parent_ranks) override;

  absl::Status AllReduce(const OpContext& ctx, TensorRef data,
                         ReduceOp op) override;
  absl::Status Broadcast(const OpContext& ctx, TensorRef data,
                         int root) override;
  absl::Status Reduce(const OpContext& ctx, TensorRef data, ReduceOp op,
                      int root) override;
  absl::Status AllGather(const OpContext& ctx, TensorRef input,
                         TensorRef output) override;
  absl::Status Gather(const OpContext& ctx, TensorRef input, TensorRef output,
                      int root) override;
  absl::Status Scatter(const OpContext& ctx, TensorRef input, TensorRef output,
                       int root) override;
  absl::Status ReduceScatter(const OpContext& ctx, TensorRef input,
                             TensorRef output, ReduceOp op) override;
  absl::Status AllToAll(const OpContext& ctx, TensorRef input,
                        absl::Span<const int64_t> input_splits,
                        TensorRef output,
                        absl::Span<const int64_t> output_splits) override;
  absl::Status Send(const OpContext& ctx, TensorRef data, int dst,
                    int tag) override;
  absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                    int tag) override;
  void Abort() override;

 private:
  NcclBackend(const CudaLibrary* cuda, const NcclLibrary* nccl, ncclComm_t comm,
              int rank, int size, int device);
  absl::Status Init();

  // Enqueues `enqueue` on the stream (inside ncclGroupStart/End when
  // `grouped`), records the event and waits for it under the watchdog.
  absl::Status Run(const OpContext& ctx,
                   const std::function<ncclResult_t()>& enqueue,
                   bool grouped = false);
  // Once the communicator is aborted: why, naming `ctx`; else OK.
  absl::Status CommFailure(const OpContext& ctx);
  // Aborts the communicator once and records why; returns `status`.
  absl::Status AbortWith(absl::Status status);
  void WatchdogLoop();

  const CudaLibrary* const cuda_;  // loaded by Create, never unloaded
  const NcclLibrary* const nccl_;
  ncclComm_t comm_;
  const int rank_;
  const int size_;
  const int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  // Device staging for AllGatherHost, kept between calls.
  DeviceBuffer host_exchange_;
  size_t host_exchange_bytes_ = 0;

  absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);  // why the comm was aborted
  bool aborted_comm_ ABSL_GUARDED_BY(mu_) = false;
  // The operation the watchdog guards (one at a time per group).
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_);
  std::string in_flight_what_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_NCCL_NCCL_BACKEND_H_
