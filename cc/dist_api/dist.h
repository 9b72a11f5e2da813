// The process-wide distributed state with mmengine.dist's semantics, in C++:
// init_dist, the default (world) group, the local (per-node) group, and the
// topology queries with their "not distributed" answers (rank 0, size 1, no
// backend). The C ABI and the bindings sit on top of this.
//
//   DK_RETURN_IF_ERROR(dist::InitDist("pytorch", {.backend = "gloo"}));
//   auto [rank, world_size] = dist::GetDistInfo();
//   if (dist::IsMainProcess()) SaveCheckpoint();
//
// A `group` argument of nullptr means the default group, as None does in
// mmengine.

#ifndef DISTKIT_CC_DIST_API_DIST_H_
#define DISTKIT_CC_DIST_API_DIST_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cc/core/device.h"
#include "cc/group/process_group.h"
#include "cc/launch/launcher.h"

namespace distkit {
namespace dist {

struct InitOptions {
  std::string backend = "gloo";
  // Per-operation timeout of the default group (mmengine passes seconds).
  absl::Duration timeout = absl::Minutes(30);
  // How long init waits for the job's ranks to join and connect; zero:
  // `timeout`. Bounds init as a whole, so a job can allow a slow start and
  // still fail its collectives fast.
  absl::Duration connect_timeout = absl::ZeroDuration();
  // Slurm: the port argument of mmengine's _init_dist_slurm.
  std::optional<int> port;
};

// Joins the job described by `launcher`'s environment ("pytorch", "slurm",
// "mpi" or "distrun"): rank 0 hosts the store unless distrun does, every rank
// connects, and the default group is created. Anything else is
// INVALID_ARGUMENT "Invalid launcher type: <launcher>".
absl::Status InitDist(absl::string_view launcher,
                      const InitOptions& options = {});

// The launcher's view of this process, read as InitDist reads it:
// `launcher`'s variables ("" : InferLauncher's choice) with mmengine's rules
// (under Slurm without SLURM_LOCALID, the rank modulo the GPUs). "mpi"
// with MASTER_ADDR unset (InitDist's test for its mpi backend) gives
// mpirun's placement only, what the mpi backend joins with. Every binding asks
// this (dk_launcher_info) instead of parsing the environment itself.
absl::StatusOr<RendezvousInfo> LauncherInfo(absl::string_view launcher);

// Joins with an explicit rank, size and store (tests, embedding).
absl::Status InitDistWithStore(std::shared_ptr<Store> store, int rank, int size,
                               const InitOptions& options = {});

// Leaves: drops the default and local groups and the store (local call).
void DestroyDist();

// Recovery without restarting: every survivor of a failure calls it; the
// default group is replaced by one of the survivors (cc/group/shrink.h),
// which it also returns. The node-local group is dropped (it may hold the
// failed rank); init_local_group can make it again.
absl::StatusOr<std::shared_ptr<ProcessGroup>> ShrinkDefaultGroup(
    absl::Duration settle);

// The way back to the job's size: every survivor calls it once a
// replacement process is on its way (distrun --max-replacements); the
// default group (shrunk or poisoned) is replaced by a group of `world_size`
// ranks (<= 0: the size this process joined with) in the original order
// (cc/group/grow.h), which it also returns. The node-local group is dropped.
absl::StatusOr<std::shared_ptr<ProcessGroup>> GrowDefaultGroup(
    int world_size, absl::Duration timeout);

// DISTKIT_REPLACEMENT: n > 0 when this process was started in place of a
// lost rank (the job's n-th replacement), 0 otherwise. InitDist then joins
// the survivors' grow (JoinGrownWorld) instead of the world's rendezvous,
// and makes no node-local group; a rank that would host the store itself
// (rank 0 without distrun) cannot be a replacement. The join waits up to
// the connect timeout for the survivors, its store calls bounded by the
// grow (that, then a margin to seal a generation that failed) rather than
// by init's bound; when they do not come it is DEADLINE_EXCEEDED naming
// their ranks, and a retried InitDist joins the same world's next grow.
// A normal init counts its world even when it fails (all ranks retry into
// the next one); a replacement's counts only once joined.
absl::StatusOr<int> ReplacementNumber();

// The world size this process joined with (InitDist's), whatever shrinks
// and grows did since; 1 when not distributed.
int JobWorldSize();

bool IsDistributed();

// cuda:<local rank> when this build has CUDA and the machine a usable GPU,
// else cpu (mmengine's get_device, per rank).
Device GetDevice();
// The default group; nullptr when not distributed.
std::shared_ptr<ProcessGroup> GetDefaultGroup();
// The backend name of `group` (or of the default group); nullopt when not
// distributed.
std::optional<std::string> GetBackend(const ProcessGroup* group = nullptr);
int GetWorldSize(const ProcessGroup* group = nullptr);
int GetRank(const ProcessGroup* group = nullptr);
// (rank, world_size); (0, 1) when not distributed.
std::pair<int, int> GetDistInfo(const ProcessGroup* group = nullptr);
bool IsMainProcess(const ProcessGroup* group = nullptr);
// No-op when not distributed.
absl::Status Barrier(const ProcessGroup* group = nullptr);
// cpu for gloo (and when not distributed); cuda:<current> for nccl.
Device GetCommDevice(const ProcessGroup* group = nullptr);

// Collective over the default group: creates the group of ranks
// [node_rank * n, (node_rank + 1) * n). FAILED_PRECONDITION if one exists,
// unless InitLocalGroupFromLauncher made it: then one with the same ranks
// is kept and one with other ranks replaces it.
absl::Status InitLocalGroup(int node_rank, int num_gpus_per_node);
// Collective over the default group (InitDist calls it on every rank): the
// node-local group of the nodes the launcher placed the ranks on, so
// GetLocalRank works right after joining, as mmengine users expect. The
// layout comes from GROUP_RANK and LOCAL_WORLD_SIZE (torchrun, distrun)
// without communication; else the ranks compare SLURM_NODEID or their host
// names (one all_gather). A single node's local group is the world itself.
// FAILED_PRECONDITION, and no group, when the nodes' ranks are not
// consecutive blocks of one size (InitLocalGroup's layout).
absl::Status InitLocalGroupFromLauncher();
// nullptr when not distributed; FAILED_PRECONDITION with mmengine's message
// when distributed without a local group.
absl::StatusOr<std::shared_ptr<ProcessGroup>> GetLocalGroup();
// 0 / 1 when not distributed; the same error as GetLocalGroup without one.
absl::StatusOr<int> GetLocalRank();
absl::StatusOr<int> GetLocalSize();

// The job store (nullptr when not distributed), for components that need
// their own namespace in it.
std::shared_ptr<Store> GetStore();

// Runs `f` on the main process only and returns its value there; other ranks
// get nullopt. Like mmengine's master_only, the result is not broadcast.
template <typename F>
auto MasterOnly(F&& f) -> std::optional<decltype(f())> {
  if (!IsMainProcess()) return std::nullopt;
  return f();
}

}  // namespace dist
}  // namespace distkit

#endif  // DISTKIT_CC_DIST_API_DIST_H_
