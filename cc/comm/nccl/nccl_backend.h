// NcclBackend runs collectives on CUDA tensors of one device (cuda:<local
// rank>) through NCCL. One communicator per group for its collectives (the
// ncclUniqueId travels through the group's Store, subgroups come from
// ncclCommSplit), used only by the group's op queue; and one two-rank
// communicator per direction of each pair that sends, made at the first
// send, used only by that pair's send or receive lane. NCCL forbids
// concurrent calls on one communicator, and the process group runs sends
// and receives on their own threads beside the collectives, so sharing
// one communicator would be a cross-rank deadlock waiting to happen (rank 0
// queues all_reduce then send, rank 1 recv then all_reduce).
//
// Each of those channels has its own CUDA stream, completion event and
// staging memory. An operation waits for the caller's work: on the
// caller's stream (SetCudaStream; the legacy default stream unless set) up
// to where it stood when the operation was issued, through an event
// recorded then on the issuing thread (MarkIssue); it is enqueued on the
// channel's stream and completes through the event, which the calling worker
// polls while watching the operation's timeout and NCCL's asynchronous errors:
// past the timeout, or on an error, the communicator is aborted and the
// operation fails naming op, group and sequence number (and the contract
// poisons the group). Communicators are non-blocking (nccl_comm.h), so init,
// split and destroy are bounded too and Abort() is safe from any thread.
//
// Every entry point first makes the group's device current on the calling
// thread (a thread starts on device 0, and touching it would put a context
// there).
//
// The contract's agreement rides alongside the operation (AgreesAlongside):
// 40 bytes per rank all-gathered on the group's stream just before the
// operation's own kernels and copied to pinned host memory, compared by the
// waiting worker while the operation runs, with no host round trip before
// it; a mismatch aborts the communicator and fails the operation on every
// rank with the mismatch's message (ABORTED). Barriers, splits and uneven
// all_to_alls exchange first (AllGatherHost, staged and waited for). What NCCL
// cannot express (bitwise reductions, except band/bor on bool as min/max) is
// refused by CheckReduce before anything runs; mean is ncclAvg for every
// dtype (NativeMean): on integers NCCL divides the wrapped sum truncating
// toward zero, as the contract's host division did and mmengine does.
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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cc/comm/backend.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/nccl/nccl_comm.h"
#include "cc/comm/nccl/nccl_library.h"
#include "cc/comm/op_signature.h"
#include "cc/core/cuda_library.h"
#include "cc/core/device_copy.h"
#include "cc/store/store.h"

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
  bool store_is_shared() const override { return true; }
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
  // ncclRemoteError names no peer; the group's roll call does
  // (Create records this rank's host for it).
  bool NamesLostPeers() const override { return false; }
  // Whether this rank's device had started the operation when it failed:
  // the work queued before it on the stream it was issued on may still have
  // been running (then this rank is the late one), or its kernels had
  // started and were waiting for peers.
  DevicePlace WhereOpFailed(const OpContext& ctx) override;

  bool AgreesAlongside() const override { return true; }
  void AgreeAlongside(const OpSignature& mine) override;
  absl::Status SetCudaStream(void* stream) override;
  void* cuda_stream() const override { return caller_stream_.load(); }
  absl::StatusOr<void*> MarkIssue(Device device) override;
  void ReleaseIssueMark(void* mark) override;

 private:
  // A communicator with the stream, events and staging memory of the one
  // thread that uses it.
  struct Channel {
    std::unique_ptr<NcclComm> comm;
    cudaStream_t stream = nullptr;
    cudaEvent_t ready = nullptr;  // the caller's work, on the legacy stream
    cudaEvent_t done = nullptr;   // the channel's last operation
    DeviceBuffer staging;         // host bytes on their way through NCCL
    size_t staging_bytes = 0;
  };
  using Enqueue =
      std::function<ncclResult_t(ncclComm_t comm, cudaStream_t stream)>;

  NcclBackend(const CudaLibrary* cuda, const NcclLibrary* nccl,
              std::shared_ptr<Store> store, int rank, int size, int device);
  // Creates the channel's stream and events around `comm`.
  absl::StatusOr<std::unique_ptr<Channel>> MakeChannel(
      std::unique_ptr<NcclComm> comm);
  void DestroyChannel(Channel& channel);
  // Makes the group's device current on the calling thread.
  absl::Status UseDevice();
  // Staging memory of at least `bytes` on the channel, kept between calls.
  absl::StatusOr<void*> Staging(Channel& channel, size_t bytes);
  // Enqueues on the channel (inside ncclGroupStart/End when `grouped`),
  // records the channel's event and waits for it under the op's timeout.
  // With `agree`, the signature AgreeAlongside handed over goes first.
  absl::Status Run(const OpContext& ctx, Channel& channel,
                   const Enqueue& enqueue, bool grouped = false,
                   bool agree = false);
  // A data operation of the group's collectives: Run on their channel, with
  // the signature AgreeAlongside handed over all-gathered on the stream just
  // before it and compared on the host while it runs.
  absl::Status RunCollective(const OpContext& ctx, const Enqueue& enqueue,
                             bool grouped = false);
  // The signature exchange's device and pinned host memory and its event.
  absl::Status InitAgreement();
  // Every rank's signature, once its event says they arrived: OK when they
  // agree, else ABORTED with CheckAgreement's message (the communicator is
  // aborted: the operation had started on every rank).
  absl::Status CheckAlongside(const OpContext& ctx);
  // The communicator for sends from `from` to `to` (group ranks): made at
  // first use by both ends through the store; only the one lane that sends
  // (or receives) in that direction uses it.
  absl::StatusOr<Channel*> PairChannel(const OpContext& ctx, int from, int to);
  // Where a failed operation was on this rank's device, from the event its
  // stream waited for: recorded for WhereOpFailed and told to the group's
  // roll call at once (ctx.answer_roll_call).
  DevicePlace WhereOnDevice(const OpContext& ctx, cudaEvent_t ready);
  // Abort() with `why`, which every later operation on this rank reports.
  void AbortFor(const absl::Status& why);
  // Once aborted: why, naming `ctx`; else OK.
  absl::Status AbortedStatus(const OpContext& ctx);

  const CudaLibrary* const cuda_;  // loaded by Create, never unloaded
  const NcclLibrary* const nccl_;
  const std::shared_ptr<Store> store_;  // the pairs' unique ids
  const int rank_;
  const int size_;
  const int device_;
  std::string name_;  // "group of <size>", for NCCL's errors
  std::unique_ptr<Channel> collectives_;
  // The agreement alongside the collectives (their thread only): this
  // rank's next signature, and where every rank's arrives.
  std::optional<OpSignature> alongside_;
  DeviceBuffer signatures_device_;          // mine, then everyone's
  OpSignature* signatures_host_ = nullptr;  // pinned, size_ entries
  cudaEvent_t signatures_arrived_ = nullptr;

  // The caller's stream (cudaStream_t; null: the legacy default stream).
  std::atomic<void*> caller_stream_{nullptr};

  absl::Mutex mu_;
  // Issue marks: events recorded on the caller's stream, reused.
  std::vector<cudaEvent_t> free_marks_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> all_marks_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);  // why Abort() was called
  // Failed operations (ctx.Describe()) not yet asked about by
  // WhereOpFailed: the collectives and each point-to-point lane may fail
  // together when a peer dies.
  absl::flat_hash_map<std::string, DevicePlace> failed_places_
      ABSL_GUARDED_BY(mu_);
  // Keyed by (from, to); a channel is created outside mu_ by its one lane.
  absl::flat_hash_map<std::pair<int, int>, std::unique_ptr<Channel>> pairs_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_NCCL_NCCL_BACKEND_H_
