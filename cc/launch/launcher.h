// Launcher detection and environment parsing. Every way of starting a job
// (torchrun, distrun, Slurm, mpirun) becomes one RendezvousInfo: this rank's
// place in the job and where the job's Store is.
//
//   Environment env = Environment::FromProcess();
//   Launcher launcher = InferLauncher(env);  // mmengine's precedence
//   DK_ASSIGN_OR_RETURN(RendezvousInfo info, ParseRendezvous(launcher, env));
//
// Store placement:
// - DISTKIT_STORE (host:port) and DISTKIT_TOKEN, set by distrun, win for
//   every launcher: the rank connects there. distrun's MASTER_PORT is that
//   port + 1, left free for torch.distributed's env:// (whose rank 0 serves
//   a TCPStore there): the two ports of torchrun below, the other way round.
// - Otherwise rank 0 hosts the store at MASTER_ADDR:<port> and the others
//   connect. <port> is MASTER_PORT, except under torchrun, whose own agent
//   store already listens on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True):
//   then MASTER_PORT + 1.
// An empty variable counts as unset (DISTKIT_STORE= is no store address).

#ifndef DISTKIT_CC_LAUNCH_LAUNCHER_H_
#define DISTKIT_CC_LAUNCH_LAUNCHER_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cc/launch/environment.h"

namespace distkit {

enum class Launcher {
  kNone = 0,     // not distributed: rank 0 of 1
  kPytorch = 1,  // torchrun / torch.distributed.launch variables (env://)
  kSlurm = 2,    // srun
  kMpi = 3,      // mpirun (OpenMPI's OMPI_COMM_WORLD_*, or PMI_*)
  kDistrun = 4,  // distkit's own launcher: pytorch variables + DISTKIT_STORE
};

// "none", "pytorch", "slurm", "mpi", "distrun".
absl::string_view LauncherName(Launcher launcher);

// Inverse of LauncherName. Anything else is INVALID_ARGUMENT with mmengine's
// text: "Invalid launcher type: <name>".
absl::StatusOr<Launcher> ParseLauncher(absl::string_view name);

// mmengine's infer_launcher: WORLD_SIZE set -> pytorch; else SLURM_NTASKS ->
// slurm; else OMPI_COMM_WORLD_LOCAL_RANK -> mpi; else none. (distrun sets
// WORLD_SIZE, so its ranks infer pytorch and find DISTKIT_STORE.)
Launcher InferLauncher(const Environment& env);

inline constexpr int kDefaultMasterPort = 29500;

// RendezvousInfo::node_rank where the launcher does not say (mpirun with
// ranks not in one block per node, e.g. --map-by node).
inline constexpr int kUnknownNodeRank = -1;

// "host:port", or "[host]:port" for an IPv6 literal (whose own colons would
// otherwise read as the port's: "fd00::1:8080" is another address).
std::string JoinHostPort(absl::string_view host, int port);

struct RendezvousInfo {
  Launcher launcher = Launcher::kNone;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  // GROUP_RANK / SLURM_NODEID. mpirun exports no node index: there it is
  // rank / local_world_size where the ranks lie in blocks of that size
  // (mpirun's default mapping), else kUnknownNodeRank. Each rank judges
  // from its own variables: on nodes of different sizes some ranks may
  // derive an index while others get kUnknownNodeRank.
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  // host:port of the job's Store; empty when not distributed.
  std::string store_address;
  // Whether this process must start the StoreServer (rank 0 without distrun).
  bool host_store = false;
  // The job token (DISTKIT_TOKEN); empty when none was set.
  std::string token;

  std::string DebugString() const;
};

struct ParseOptions {
  // Slurm: an explicit port wins over MASTER_PORT and the default 29500.
  std::optional<int> port;
  // Slurm without SLURM_LOCALID: local rank = rank % num_devices when > 0.
  int num_devices = 0;
};

// Reads `launcher`'s variables from `env`. A missing or malformed variable is
// INVALID_ARGUMENT naming it and the launcher; an inconsistent job (rank out
// of range) names the values.
absl::StatusOr<RendezvousInfo> ParseRendezvous(
    Launcher launcher, const Environment& env,
    const ParseOptions& options = {});

// mpirun's placement of this process only (OpenMPI's OMPI_COMM_WORLD_* or
// PMI's variables; under srun's PMI, Slurm's for the node): rank, sizes,
// local and node rank, no store address. For
// the mpi backend, whose ranks connect through MPI itself (and find rank
// 0's store through it: cc/comm/mpi/mpi_job_store.h).
absl::StatusOr<RendezvousInfo> ParseMpiPlacement(const Environment& env);

// What mmengine's init_dist exports under Slurm and MPI, so code that reads
// torchrun's variables after init (torch.distributed's env://, a trainer's
// os.environ['LOCAL_RANK']) sees this rank: RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, and MASTER_ADDR / MASTER_PORT when `info` has them.
std::map<std::string, std::string> TorchrunVariables(
    const RendezvousInfo& info);

}  // namespace distkit

#endif  // DISTKIT_CC_LAUNCH_LAUNCHER_H_
