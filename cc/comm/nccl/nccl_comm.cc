#include "cc/comm/nccl/nccl_comm.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// How long the destructor lets ncclCommFinalize flush before it aborts: a
// healthy communicator has nothing in flight by then (every op was waited
// for), so only a dead or hung peer reaches this bound.
constexpr absl::Duration kFinalizeBound = absl::Seconds(5);

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Polling interval while NCCL finishes a non-blocking call: short, since an
// enqueue normally completes within microseconds.
constexpr absl::Duration kPoll = absl::Microseconds(10);

}  // namespace

absl::Status NcclStatus(const NcclLibrary& nccl, ncclResult_t r,
                        absl::string_view what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(what, ": ", nccl.GetErrorString(r)));
}

NcclComm::NcclComm(const CudaLibrary* cuda, const NcclLibrary* nccl,
                   ncclComm_t comm, int device, std::string name)
    : cuda_(cuda),
      nccl_(nccl),
      device_(device),
      name_(std::move(name)),
      comm_(comm) {}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Init(
    const CudaLibrary* cuda, const NcclLibrary* nccl, int device, int nranks,
    const ncclUniqueId& id, int rank, absl::Time deadline,
    std::function<bool()> cancelled, std::string name) {
  DK_RETURN_IF_ERROR(
      CudaStatus(*cuda, cuda->SetDevice(device), "cudaSetDevice"));
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t raw = nullptr;
  const ncclResult_t r =
      nccl->CommInitRankConfig(&raw, nranks, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (raw != nullptr) nccl->CommAbort(raw);
    return NcclStatus(*nccl, r,
                      absl::StrCat(name, ": ncclCommInitRankConfig (rank ",
                                   rank, " of ", nranks, ")"));
  }
  std::unique_ptr<NcclComm> comm(
      new NcclComm(cuda, nccl, raw, device, std::move(name)));
  absl::MutexLock lock(&comm->mu_);
  DK_RETURN_IF_ERROR(comm->AwaitReady(
      deadline,
      absl::StrCat("ncclCommInitRankConfig (rank ", rank, " of ", nranks, ")"),
      cancelled));
  return comm;
}

NcclComm::~NcclComm() {
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr) return;
  // No cudaSetDevice: NCCL's own calls switch to the communicator's device
  // and back, and this may run on a user's thread whose device is theirs.
  const ncclResult_t r = nccl_->CommFinalize(comm_);
  absl::Status finalized =
      (r == ncclSuccess || r == ncclInProgress)
          ? AwaitReady(absl::Now() + kFinalizeBound, "ncclCommFinalize")
          : NcclStatus(*nccl_, r, "ncclCommFinalize");
  // AwaitReady aborted the communicator if finalizing failed.
  if (finalized.ok() && comm_ != nullptr) {
    nccl_->CommDestroy(comm_);
    comm_ = nullptr;
  }
}

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Split(bool member, int key,
                                                          absl::Time deadline,
                                                          std::string name) {
  absl::MutexLock lock(&mu_);
  DK_RETURN_IF_ERROR(failure_);
  DK_RETURN_IF_ERROR(
      CudaStatus(*cuda_, cuda_->SetDevice(device_), "cudaSetDevice"));
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t raw = nullptr;
  const ncclResult_t r = nccl_->CommSplit(
      comm_, member ? 0 : NCCL_SPLIT_NOCOLOR, member ? key : 0, &raw, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    const absl::Status s = NcclStatus(*nccl_, r, name_ + ": ncclCommSplit");
    AbortLocked(s);
    return s;
  }
  // The parent's state says when the split is done; the child then exists
  // (or not, for a rank outside it).
  if (absl::Status split = AwaitReady(deadline, "ncclCommSplit"); !split.ok()) {
    if (raw != nullptr) nccl_->CommAbort(raw);  // half made: not leaked
    return split;
  }
  if (!member) return std::unique_ptr<NcclComm>();
  std::unique_ptr<NcclComm> child(
      new NcclComm(cuda_, nccl_, raw, device_, std::move(name)));
  {
    absl::MutexLock child_lock(&child->mu_);
    DK_RETURN_IF_ERROR(child->AwaitReady(deadline, "ncclCommSplit"));
  }
  return child;
}

absl::Status NcclComm::Enqueue(
    const std::function<ncclResult_t(ncclComm_t)>& calls, absl::Time deadline,
    absl::string_view what) {
  absl::MutexLock lock(&mu_);
  DK_RETURN_IF_ERROR(failure_);
  DK_RETURN_IF_ERROR(
      CudaStatus(*cuda_, cuda_->SetDevice(device_), "cudaSetDevice"));
  const ncclResult_t r = calls(comm_);
  if (r != ncclSuccess && r != ncclInProgress) {
    const absl::Status s = NcclStatus(*nccl_, r, what);
    AbortLocked(s);
    return s;
  }
  return AwaitReady(deadline, what);
}

absl::Status NcclComm::AwaitReady(absl::Time deadline, absl::string_view what,
                                  const std::function<bool()>& cancelled) {
  while (true) {
    DK_RETURN_IF_ERROR(failure_);
    if (cancelled != nullptr && cancelled()) {
      AbortLocked(absl::CancelledError(
          absl::StrCat(what, ": cancelled (the group was aborted)")));
      return failure_;
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = nccl_->CommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      AbortLocked(NcclStatus(*nccl_, state, what));
      return failure_;
    }
    if (absl::Now() > deadline) {
      AbortLocked(absl::DeadlineExceededError(
          absl::StrCat(what,
                       ": NCCL did not finish in time; the communicator "
                       "was aborted")));
      return failure_;
    }
    // Abort() may run meanwhile: it is allowed from another thread on a
    // non-blocking communicator, and failure_ says so on the next turn.
    mu_.Unlock();
    absl::SleepFor(kPoll);
    mu_.Lock();
  }
}

absl::Status NcclComm::Health(absl::string_view what) {
  absl::MutexLock lock(&mu_);
  DK_RETURN_IF_ERROR(failure_);
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = nccl_->CommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) state = r;
  if (state != ncclSuccess && state != ncclInProgress) {
    AbortLocked(NcclStatus(*nccl_, state, what));
  }
  return failure_;
}

void NcclComm::Abort(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  AbortLocked(why);
}

void NcclComm::AbortLocked(const absl::Status& why) {
  if (!failure_.ok()) return;
  failure_ = absl::Status(why.code(),
                          absl::StrCat(why.message(), " (", name_,
                                       "'s NCCL communicator was aborted)"));
  if (comm_ != nullptr) {
    nccl_->CommAbort(comm_);
    comm_ = nullptr;
  }
}

absl::Status NcclComm::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

}  // namespace distkit
