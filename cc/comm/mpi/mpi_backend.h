// File: mpi_backend.h
//
// MpiBackend runs collectives on CPU buffers through OpenMPI: the world is
// MPI_COMM_WORLD, subgroups come from MPI_Comm_split. Like the Gloo backend,
// every operation first exchanges an OpSignature (one MPI_Iallgather), so a
// call that does not match across ranks fails on every rank with a message
// naming what each called, instead of MPI truncating or hanging. Operations
// are nonblocking MPI calls completed by a polling loop, which gives them the
// op's timeout and makes Abort() effective; a timed-out or aborted MPI
// request cannot be withdrawn, so either poisons the backend (every later
// call fails with FAILED_PRECONDITION), as with Gloo and NCCL.
//
// MPI is initialized once per process with MPI_THREAD_MULTIPLE (the group's
// worker and point-to-point lanes call MPI from several threads) and
// finalized at exit.

#ifndef DISTKIT_CC_COMM_MPI_MPI_BACKEND_H_
#define DISTKIT_CC_COMM_MPI_MPI_BACKEND_H_

#include <mpi.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cc/comm/backend.h"
#include "cc/comm/op_signature.h"

namespace distkit {

class MpiBackend : public Backend {
 public:
  // Initializes MPI if needed and returns this process's (rank, size) in
  // MPI_COMM_WORLD.
  static absl::StatusOr<std::pair<int, int>> WorldRankAndSize();

  // The world group. `rank` and `size` are what the caller expects (checked
  // against MPI_COMM_WORLD).
  static absl::StatusOr<std::unique_ptr<MpiBackend>> CreateWorld(int rank,
                                                                 int size);

  // Collective over this backend's ranks: the members (`parent_ranks`, in
  // the new group's order) get a backend over them; the others nullptr.
  bool splits_from_parent() const override { return true; }
  absl::StatusOr<std::unique_ptr<Backend>> Split(
      const OpContext& ctx, const std::vector<int>& parent_ranks) override;

  ~MpiBackend() override;

  absl::string_view name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

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
  absl::Status Barrier(const OpContext& ctx) override;
  absl::Status Send(const OpContext& ctx, TensorRef data, int dst,
                    int tag) override;
  absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                    int tag) override;
  void Abort() override;

 private:
  MpiBackend(MPI_Comm comm, int rank, int size);

  // Exchanges `sig` with every rank and checks agreement.
  absl::Status Agree(const OpContext& ctx, const OpSignature& sig);
  // Completes `requests` (polling), within ctx.timeout, unless aborted.
  absl::Status Complete(const OpContext& ctx,
                        std::vector<MPI_Request>& requests);
  absl::Status Complete(const OpContext& ctx, MPI_Request request);
  // Fails fast once poisoned; `rc` != MPI_SUCCESS becomes an error.
  absl::Status Usable(const OpContext& ctx);
  absl::Status Check(const OpContext& ctx, int rc, const char* call);
  absl::Status Poison(absl::Status status);

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  std::atomic<bool> aborted_{false};
  absl::Mutex mu_;
  absl::Status poison_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_MPI_MPI_BACKEND_H_
