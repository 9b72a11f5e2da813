// The only memory the MPI backend hands MPI is its own: each operation's
// inputs are copied into a staging buffer (MpiStage) before its request is
// posted, and its outputs are received into staging and copied to the caller
// only once the request has completed successfully. A request that timed out
// or was aborted cannot be withdrawn (MPI_Cancel and MPI_Request_free on a
// nonblocking collective's request are erroneous), and MPI goes on reading
// and writing its buffers whenever any later call of the process drives its
// progress engine (a late peer completes it). Such a request goes, with the
// stage it names, into a process-wide quarantine: polled with MPI_Test at
// the backend's later MPI calls, an entry's stage is freed once its request
// has completed, never before (entries left at exit leak with the process).
// So after an MPI operation has returned an error, MPI touches no memory of
// the caller's nor the collective contract's (its P2P header on the stack,
// its split matrices), and a peer that completes the operation late reads
// this rank's staged input, not memory the caller freed or reused.

#ifndef DISTKIT_CC_COMM_MPI_MPI_STAGING_H_
#define DISTKIT_CC_COMM_MPI_MPI_STAGING_H_

#include <mpi.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <mutex>  // NOLINT: see MpiStagePool::mu_
#include <vector>

namespace distkit {

// One operation's memory for MPI: bytes, and the int arrays
// MPI_Ialltoallv's counts and displacements live in.
class MpiStage {
 public:
  // At least `bytes` bytes (contents undefined), page-aligned, so that the
  // backend can place each region at its caller's buffer's offset within a
  // page (copies between buffers a few bytes apart modulo a page are many
  // times slower: MpiBackend's Region).
  void Reserve(size_t bytes);
  char* data() { return data_.get(); }
  size_t capacity() const { return capacity_; }
  std::vector<int>& ints() { return ints_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t capacity_ = 0;
  std::vector<int> ints_;
};

// A backend's stages, reused across its operations so that one that
// completes normally allocates nothing (operations of a group may run at once:
// a collective beside sends and receives, so a few are kept).
class MpiStagePool {
 public:
  // A stage of at least `bytes` bytes.
  std::unique_ptr<MpiStage> Acquire(size_t bytes);
  // Back for reuse: only a stage MPI is done with.
  void Release(std::unique_ptr<MpiStage> stage);

 private:
  // Kept for reuse: at most kKept stages of at most kMaxKeptBytes each (a
  // larger one is freed, so a rare huge operation does not pin its memory).
  static constexpr size_t kKept = 4;
  static constexpr size_t kMaxKeptBytes = size_t{256} << 20;
  // A plain mutex: taken twice per operation, and absl::Mutex's deadlock
  // detection (on in the system's Abseil) costs more than the work it guards.
  std::mutex mu_;
  std::vector<std::unique_ptr<MpiStage>> free_;  // guarded by mu_
};

// With MpiMutex() held (DK_MPI): `request`, which was given up on, keeps
// `stage` alive until MPI_Test says it completed (or cancelled).
void QuarantineMpiRequestLocked(MPI_Request request,
                                std::unique_ptr<MpiStage> stage);
// With MpiMutex() held: tests each quarantined request once and frees the
// stages of those that completed. Cheap when none is quarantined.
void PollMpiQuarantineLocked();
// How many requests are quarantined (tests).
size_t MpiQuarantineSize();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_MPI_MPI_STAGING_H_
