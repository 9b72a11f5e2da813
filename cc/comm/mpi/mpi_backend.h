// MpiBackend moves CPU buffers through OpenMPI: the world is a duplicate of
// MPI_COMM_WORLD (the application's own MPI traffic never matches distkit's),
// subgroups come from MPI_Comm_split (every rank of the parent) or
// MPI_Comm_create_group (the members alone, as torch.distributed creates).
// Operations are nonblocking MPI calls completed by a polling loop, which gives
// them the op's timeout (DEADLINE_EXCEEDED) and makes Abort() effective
// (CANCELLED). MPI is handed the backend's own staging memory only
// (mpi_staging.h): a timed-out or aborted request cannot be withdrawn, so it
// is quarantined with its staging until it completes, and MPI never touches
// the caller's buffers after an operation returned. The contract then poisons
// the group, and the process skips MPI_Finalize at exit (mpi_runtime.h).

#ifndef DISTKIT_CC_COMM_MPI_MPI_BACKEND_H_
#define DISTKIT_CC_COMM_MPI_MPI_BACKEND_H_

#include <mpi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cc/comm/backend.h"
#include "cc/comm/mpi/mpi_library.h"
#include "cc/comm/mpi/mpi_runtime.h"
#include "cc/comm/mpi/mpi_staging.h"
#include "cc/core/status.h"

namespace distkit {

class MpiBackend : public Backend {
 public:
  // The world group, over a duplicate of MPI_COMM_WORLD. `rank` and `size`
  // are what the caller expects (checked against MPI_COMM_WORLD). MPI's init
  // and the duplication wait for every rank; after `init_timeout` it is
  // DEADLINE_EXCEEDED.
  static absl::StatusOr<std::unique_ptr<MpiBackend>> CreateWorld(
      int rank, int size, absl::Duration init_timeout);
  ~MpiBackend() override;

  absl::string_view name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Collective over this backend's ranks: the members (`parent_ranks`, in
  // the new group's order) get a backend over them; the others nullptr.
  // MPI_Comm_split has no timeout of its own and waits for every rank, so,
  // as CreateAmongMembers, it runs outside MPI's lock on a thread of its own:
  // a rank that never comes is DEADLINE_EXCEEDED after ctx.timeout (CANCELLED
  // after Abort()), and this process's other groups go on meanwhile.
  bool splits_from_parent() const override { return true; }
  int64_t MaxAllToAllElements() const override;
  absl::StatusOr<std::unique_ptr<Backend>> Split(
      const OpContext& ctx, const std::vector<int>& parent_ranks) override;
  // The members alone: MPI_Comm_create_group, tagged from `name`. It has no
  // timeout of its own, so it runs on a thread of its own and a member that
  // never calls is DEADLINE_EXCEEDED after ctx.timeout (a member that comes
  // later may still succeed alone, with a group whose peers gave up). One
  // creation at a time per group: two at once could share a tag.
  absl::StatusOr<std::unique_ptr<Backend>> CreateAmongMembers(
      const OpContext& ctx, const std::vector<int>& parent_ranks,
      absl::string_view name) override;

  absl::Status AllGatherHost(const OpContext& ctx, const void* in, size_t bytes,
                             void* out) override;
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
  // Tags are MPI tags: [0, 32767] (the range MPI guarantees).
  absl::Status Send(const OpContext& ctx, TensorRef data, int dst,
                    int tag) override;
  absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                    int tag) override;
  void Abort() override;

 private:
  MpiBackend(MPI_Comm comm, int rank, int size);

  // Every operation's one nonblocking call: `start(&request)` runs under the
  // MPI lock and returns the call's code (Check names `call`), then the
  // request completes as Complete says. `stage` holds every buffer `start`
  // names; on an error after the request was posted it is gone (quarantined).
  template <typename StartFn>
  absl::Status Nonblocking(const OpContext& ctx, const char* call,
                           std::unique_ptr<MpiStage>& stage, StartFn start,
                           bool receive = false) {
    MPI_Request request = nullptr;  // set by start
    DK_RETURN_IF_ERROR(
        Check(ctx, DK_MPI((PollMpiQuarantineLocked(), start(&request))), call));
    return Complete(ctx, request, stage, receive);
  }
  // A caller's buffer as an operation stages it (mpi_backend.cc's
  // collectives): `bytes` of the stage laid out like `caller`, copied in
  // from it before the call when `in`, and out to it (then written) once
  // the request completed when `out`.
  struct StagedBuffer {
    const void* caller;
    size_t bytes;
    bool in;
    bool out;
  };
  // The operation's one nonblocking call (Nonblocking) on staged copies of
  // its buffers: in place on `buf`, or from `send` to `recv` (separate
  // regions, so MPI never gets aliased buffers, whatever the caller's).
  absl::Status Staged(const OpContext& ctx, const char* call, StagedBuffer buf,
                      absl::FunctionRef<int(char* buf, MPI_Request*)> start,
                      bool receive = false);
  absl::Status Staged(
      const OpContext& ctx, const char* call, StagedBuffer send,
      StagedBuffer recv,
      absl::FunctionRef<int(char* send, char* recv, MPI_Request*)> start);
  // Both forms' body (one or two buffers).
  absl::Status StagedAll(
      const OpContext& ctx, const char* call,
      absl::Span<const StagedBuffer> buffers,
      absl::FunctionRef<int(char* const* staged, MPI_Request*)> start,
      bool receive);
  // Completes `request` (polling), within ctx.timeout, unless aborted. When
  // it gives up, `stage` moves into the quarantine with the request (a
  // `receive` is cancelled first, which MPI allows for point to point).
  absl::Status Complete(const OpContext& ctx, MPI_Request request,
                        std::unique_ptr<MpiStage>& stage, bool receive);
  // A stage of `bytes` bytes from this backend's pool, and back.
  std::unique_ptr<MpiStage> Stage(size_t bytes) { return pool_.Acquire(bytes); }
  void Unstage(std::unique_ptr<MpiStage> stage) {
    pool_.Release(std::move(stage));
  }
  // `rc` != MPI_SUCCESS becomes UNAVAILABLE naming the call.
  absl::Status Check(const OpContext& ctx, int rc, const char* call) const;
  absl::Status CheckTag(const OpContext& ctx, int tag) const;
  // `n` as MPI's int count, else INVALID_ARGUMENT (alike on every rank).
  absl::StatusOr<int> Count(int64_t n, const OpContext& ctx) const;
  // "all_reduce #3 on group 'world' (rank 1)".
  std::string Where(const OpContext& ctx) const;
  // A communicator's blocking creation (MPI_Comm_split,
  // MPI_Comm_create_group), bounded by ctx.timeout and abort.
  absl::StatusOr<MPI_Comm> CommOnOwnThread(const OpContext& ctx,
                                           std::function<int(MPI_Comm*)> call,
                                           const char* what,
                                           const std::string& waiting_for);

  const MpiLibrary& mpi_;
  MPI_Comm comm_;
  const int rank_;
  const int size_;
  std::atomic<bool> aborted_{false};
  // A request of this communicator was left pending: it cannot be freed.
  std::atomic<bool> abandoned_{false};
  MpiStagePool pool_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_MPI_MPI_BACKEND_H_
