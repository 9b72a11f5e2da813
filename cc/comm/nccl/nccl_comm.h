// NcclComm: one NCCL communicator, made non-blocking (config.blocking = 0),
// and the rules NCCL sets for using it, kept in one place:
//  - one thread at a time: every call holds mu_ (NCCL forbids concurrent
//    calls on a communicator);
//  - bounded: a call that returns ncclInProgress is waited for, by polling
//    ncclCommGetAsyncError, only until the deadline; init, split, finalize
//    included, so a rank that never comes cannot hang its peers;
//  - abort from any thread: Abort() takes mu_ too, which a non-blocking call
//    holds only briefly, then frees the communicator; every later call is
//    refused with the reason instead of touching freed memory;
//  - every call runs on the communicator's device (the current device is
//    per thread, and a thread that has not chosen one is on device 0).

#ifndef DISTKIT_CC_COMM_NCCL_NCCL_COMM_H_
#define DISTKIT_CC_COMM_NCCL_NCCL_COMM_H_

#include <nccl.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cc/comm/nccl/nccl_library.h"
#include "cc/core/cuda_library.h"

namespace distkit {

// "<what>: <NCCL's text>" as UNAVAILABLE; OK for ncclSuccess.
absl::Status NcclStatus(const NcclLibrary& nccl, ncclResult_t r,
                        absl::string_view what);

class NcclComm {
 public:
  // ncclCommInitRankConfig on `device`, waiting for every rank until
  // `deadline`, or until `cancelled` says so (then aborted: CANCELLED);
  // `name` appears in every error ("group 'world'").
  static absl::StatusOr<std::unique_ptr<NcclComm>> Init(
      const CudaLibrary* cuda, const NcclLibrary* nccl, int device, int nranks,
      const ncclUniqueId& id, int rank, absl::Time deadline,
      std::function<bool()> cancelled, std::string name);

  // Frees the communicator: ncclCommFinalize bounded by a few seconds (a
  // dead peer must not hang the destructor), then ncclCommDestroy, or
  // ncclCommAbort when finalizing failed or took too long.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // ncclCommSplit: this rank's part of the new communicator (key orders the
  // ranks), or nullptr when `member` is false (NCCL_SPLIT_NOCOLOR).
  // Collective over this communicator.
  absl::StatusOr<std::unique_ptr<NcclComm>> Split(bool member, int key,
                                                  absl::Time deadline,
                                                  std::string name);

  // Runs `calls` (NCCL calls on the communicator it is given, e.g. a group
  // of sends) on the device under the lock, and waits until NCCL has taken
  // them (no longer ncclInProgress) or the deadline passes, which aborts the
  // communicator. A failure aborts it too: NCCL's state after a failed
  // enqueue is unknown.
  absl::Status Enqueue(const std::function<ncclResult_t(ncclComm_t)>& calls,
                       absl::Time deadline, absl::string_view what);

  // OK while the communicator is healthy; else why not, aborting it on the
  // first error NCCL reports (a peer died, a network failure).
  absl::Status Health(absl::string_view what);

  // Aborts once with `why`; safe from any thread, at any time. Later calls
  // fail with `why`.
  void Abort(const absl::Status& why);

  // Why the communicator was aborted; OK while it was not.
  absl::Status failure() const;

  int device() const { return device_; }

 private:
  NcclComm(const CudaLibrary* cuda, const NcclLibrary* nccl, ncclComm_t comm,
           int device, std::string name);
  // Polls ncclCommGetAsyncError until it is no longer ncclInProgress.
  absl::Status AwaitReady(absl::Time deadline, absl::string_view what,
                          const std::function<bool()>& cancelled = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CudaLibrary* const cuda_;
  const NcclLibrary* const nccl_;
  const int device_;
  const std::string name_;
  mutable absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);  // nullptr once aborted
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_NCCL_NCCL_COMM_H_
