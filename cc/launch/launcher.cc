#include "cc/launch/launcher.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cc/core/enum_names.h"
#include "cc/core/status.h"
#include "cc/launch/hostlist.h"

namespace distkit {
namespace {

// Reads an integer variable for `launcher`; unset is an error naming both.
absl::StatusOr<int> Required(const Environment& env, Launcher launcher,
                             absl::string_view name) {
  absl::StatusOr<int64_t> v = env.GetInt(name);
  if (!v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launcher '", LauncherName(launcher), "': ", v.status().message()));
  }
  // A value beyond int would be read modulo 2^32 (RANK=4294967297 as 1).
  if (*v < std::numeric_limits<int>::min() ||
      *v > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launcher '", LauncherName(launcher), "': environment variable ", name,
        "=", *v, " is out of range"));
  }
  return static_cast<int>(*v);
}

absl::StatusOr<int> Optional(const Environment& env, Launcher launcher,
                             absl::string_view name, int fallback) {
  if (!env.Has(name)) return fallback;
  return Required(env, launcher, name);
}

absl::StatusOr<std::string> RequiredText(const Environment& env,
                                         Launcher launcher,
                                         absl::string_view name) {
  std::optional<std::string> v = env.Get(name);
  if (!v.has_value() || v->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher '", LauncherName(launcher),
                     "': environment variable ", name, " is not set"));
  }
  return *v;
}

// Whether `name` is set to something: an empty value counts as unset, in
// every check and in the store's placement alike.
bool HasText(const Environment& env, absl::string_view name) {
  return !env.Get(name).value_or("").empty();
}

absl::Status Validate(const RendezvousInfo& info) {
  if (info.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher '", LauncherName(info.launcher),
                     "': world size ", info.world_size, " must be at least 1"));
  }
  if (info.rank < 0 || info.rank >= info.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher '", LauncherName(info.launcher), "': rank ",
                     info.rank, " is outside [0, ", info.world_size, ")"));
  }
  if (info.local_world_size < 1 || info.local_rank < 0 ||
      info.local_rank >= info.local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launcher '", LauncherName(info.launcher), "': local rank ",
        info.local_rank, " is outside [0, ", info.local_world_size, ")"));
  }
  // mpirun names no node: kUnknownNodeRank there (ParseMpiPlacement).
  const bool unknown_node =
      info.launcher == Launcher::kMpi && info.node_rank == kUnknownNodeRank;
  if (info.node_rank < 0 && !unknown_node) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher '", LauncherName(info.launcher), "': node rank ",
                     info.node_rank, " is negative"));
  }
  if (info.master_port < 0 || info.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher '", LauncherName(info.launcher), "': port ",
                     info.master_port, " is outside [0, 65535]"));
  }
  return absl::OkStatus();
}

// DISTKIT_STORE / DISTKIT_TOKEN, or rank 0 hosting at addr:port.
void PlaceStore(const Environment& env, int store_port, RendezvousInfo* info) {
  info->token = env.Get("DISTKIT_TOKEN").value_or("");
  if (HasText(env, "DISTKIT_STORE")) {
    info->store_address = *env.Get("DISTKIT_STORE");
    info->host_store = false;
    return;
  }
  info->store_address = JoinHostPort(info->master_addr, store_port);
  info->host_store = info->rank == 0;
}

absl::StatusOr<RendezvousInfo> ParsePytorch(Launcher launcher,
                                            const Environment& env) {
  RendezvousInfo info;
  info.launcher = launcher;
  DK_ASSIGN_OR_RETURN(info.rank, Required(env, launcher, "RANK"));
  DK_ASSIGN_OR_RETURN(info.world_size, Required(env, launcher, "WORLD_SIZE"));
  DK_ASSIGN_OR_RETURN(info.local_rank, Required(env, launcher, "LOCAL_RANK"));
  DK_ASSIGN_OR_RETURN(
      info.local_world_size,
      Optional(env, launcher, "LOCAL_WORLD_SIZE", info.world_size));
  DK_ASSIGN_OR_RETURN(info.node_rank, Optional(env, launcher, "GROUP_RANK", 0));
  const bool has_store = HasText(env, "DISTKIT_STORE");
  if (launcher == Launcher::kDistrun && !has_store) {
    return absl::InvalidArgumentError(
        "launcher 'distrun': environment variable DISTKIT_STORE is not set "
        "(start the program with distrun)");
  }
  if (has_store) {
    info.master_addr = env.Get("MASTER_ADDR").value_or("");
    DK_ASSIGN_OR_RETURN(info.master_port,
                        Optional(env, launcher, "MASTER_PORT", 0));
  } else {
    DK_ASSIGN_OR_RETURN(info.master_addr,
                        RequiredText(env, launcher, "MASTER_ADDR"));
    DK_ASSIGN_OR_RETURN(info.master_port,
                        Required(env, launcher, "MASTER_PORT"));
  }
  DK_RETURN_IF_ERROR(Validate(info));
  const bool agent_store = env.Get("TORCHELASTIC_USE_AGENT_STORE") == "True";
  const int store_port = info.master_port + (agent_store ? 1 : 0);
  if (store_port > 65535 && has_store) {
    // DISTKIT_STORE wins: the port above MASTER_PORT is not used.
  } else if (store_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launcher '", LauncherName(launcher),
        "': MASTER_PORT=", info.master_port,
        " leaves no port above it for distkit's store "
        "(TORCHELASTIC_USE_AGENT_STORE=True puts it at MASTER_PORT + 1)"));
  }
  PlaceStore(env, store_port, &info);
  return info;
}

// Slurm's compressed task counts, one per node: "2(x3),1" -> 2 2 2 1.
absl::StatusOr<std::vector<int>> ExpandTasksPerNode(Launcher launcher,
                                                    absl::string_view var,
                                                    absl::string_view text) {
  constexpr size_t kMaxNodes = 1000000;
  const absl::Status malformed = absl::InvalidArgumentError(absl::StrCat(
      "launcher '", LauncherName(launcher), "': environment variable ", var,
      "='", text, "' is malformed"));
  std::vector<int> counts;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    absl::string_view count = item, repeat = "1";
    const size_t open = item.find('(');
    if (open != absl::string_view::npos) {
      if (!absl::ConsumeSuffix(&item, ")") || item.substr(open + 1, 1) != "x") {
        return malformed;
      }
      count = item.substr(0, open);
      repeat = item.substr(open + 2);
    }
    int n = 0, times = 0;
    if (!absl::SimpleAtoi(count, &n) || n < 1 ||
        !absl::SimpleAtoi(repeat, &times) || times < 1 ||
        static_cast<size_t>(times) > kMaxNodes - counts.size()) {
      return malformed;
    }
    counts.insert(counts.end(), times, n);
  }
  return counts;
}

// This node's task count under srun, from the variable that named it.
struct SlurmTasks {
  int count;
  std::string var, text;
};

// Nodes may run different numbers of tasks ("2(x3),1"): this node's count
// is the one at `node_rank` (SLURM_NODEID). SLURM_TASKS_PER_NODE holds the
// counts the nodes got, and wins: SLURM_NTASKS_PER_NODE is only what was
// asked for (srun -n 6 --ntasks-per-node=4 gives it 4, but "4,2" on two
// nodes). nullopt when neither is set.
absl::StatusOr<std::optional<SlurmTasks>> SlurmTasksOnNode(
    const Environment& env, Launcher launcher, int node_rank) {
  for (absl::string_view var :
       {"SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"}) {
    std::optional<std::string> per_node = env.Get(var);
    if (!per_node.has_value()) continue;
    DK_ASSIGN_OR_RETURN(std::vector<int> counts,
                        ExpandTasksPerNode(launcher, var, *per_node));
    const bool uniform = std::count(counts.begin(), counts.end(), counts[0]) ==
                         static_cast<std::ptrdiff_t>(counts.size());
    SlurmTasks tasks{counts[0], std::string(var), *per_node};
    if (uniform) return tasks;
    if (!env.Has("SLURM_NODEID")) {
      return absl::InvalidArgumentError(
          absl::StrCat("launcher '", LauncherName(launcher),
                       "': environment variable SLURM_NODEID is not set, and ",
                       var, "='", *per_node, "' differs between nodes"));
    }
    if (node_rank < 0 || static_cast<size_t>(node_rank) >= counts.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("launcher '", LauncherName(launcher),
                       "': SLURM_NODEID=", node_rank, " is outside the ",
                       counts.size(), " nodes of ", var, "='", *per_node, "'"));
    }
    tasks.count = counts[node_rank];
    return tasks;
  }
  return std::nullopt;
}

absl::StatusOr<RendezvousInfo> ParseSlurm(const Environment& env,
                                          const ParseOptions& options) {
  const Launcher launcher = Launcher::kSlurm;
  RendezvousInfo info;
  info.launcher = launcher;
  DK_ASSIGN_OR_RETURN(info.rank, Required(env, launcher, "SLURM_PROCID"));
  DK_ASSIGN_OR_RETURN(info.world_size, Required(env, launcher, "SLURM_NTASKS"));
  DK_ASSIGN_OR_RETURN(std::string nodelist,
                      RequiredText(env, launcher, "SLURM_NODELIST"));
  absl::StatusOr<std::vector<std::string>> hosts = ExpandHostlist(nodelist);
  if (!hosts.ok()) {
    return Annotate(hosts.status(), "launcher 'slurm': SLURM_NODELIST");
  }
  const bool has_local_id = env.Has("SLURM_LOCALID");
  if (has_local_id) {
    DK_ASSIGN_OR_RETURN(info.local_rank,
                        Required(env, launcher, "SLURM_LOCALID"));
  } else {
    info.local_rank =
        options.num_devices > 0 ? info.rank % options.num_devices : 0;
  }
  DK_ASSIGN_OR_RETURN(info.node_rank,
                      Optional(env, launcher, "SLURM_NODEID", 0));
  if (info.node_rank < 0 ||
      static_cast<size_t>(info.node_rank) >= hosts->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launcher 'slurm': SLURM_NODEID=", info.node_rank, " is outside the ",
        hosts->size(), " node(s) of SLURM_NODELIST='", nodelist, "'"));
  }
  info.local_world_size = info.world_size;
  DK_ASSIGN_OR_RETURN(std::optional<SlurmTasks> tasks,
                      SlurmTasksOnNode(env, launcher, info.node_rank));
  if (tasks.has_value()) {
    info.local_world_size = tasks->count;
    if (has_local_id && info.local_rank >= info.local_world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "launcher 'slurm': SLURM_LOCALID=", info.local_rank,
          " is not below node ", info.node_rank, "'s ", info.local_world_size,
          " task(s) in ", tasks->var, "='", tasks->text, "'"));
    }
  }
  // Guessed from the devices (no SLURM_LOCALID): at least as many.
  if (info.local_rank >= info.local_world_size) {
    info.local_world_size = info.local_rank + 1;
  }
  // An existing MASTER_ADDR is kept; otherwise the first host of the list.
  info.master_addr = env.Get("MASTER_ADDR").value_or("");
  if (info.master_addr.empty()) info.master_addr = hosts->front();
  if (options.port.has_value()) {
    info.master_port = *options.port;
  } else {
    DK_ASSIGN_OR_RETURN(info.master_port, Optional(env, launcher, "MASTER_PORT",
                                                   kDefaultMasterPort));
  }
  PlaceStore(env, info.master_port, &info);
  DK_RETURN_IF_ERROR(Validate(info));
  return info;
}

// mpirun's ranks name no node index: rank / local_world_size where this
// rank is local rank `local_rank` of a block of local_world_size
// consecutive ranks, every node as many as world_size allows (mpirun's
// default mapping, and the layout init_local_group(node_rank, n) names);
// kUnknownNodeRank otherwise (e.g. --map-by node).
int NodeRankOfBlocks(const RendezvousInfo& info) {
  const int n = info.local_world_size;
  if (n < 1 || info.rank < 0 || info.world_size % n != 0 ||
      info.rank % n != info.local_rank) {
    return kUnknownNodeRank;
  }
  return info.rank / n;
}

absl::StatusOr<RendezvousInfo> ParseMpi(const Environment& env) {
  const Launcher launcher = Launcher::kMpi;
  DK_ASSIGN_OR_RETURN(RendezvousInfo info, ParseMpiPlacement(env));
  info.master_addr = env.Get("MASTER_ADDR").value_or("");
  if (info.master_addr.empty() && !HasText(env, "DISTKIT_STORE")) {
    // mmengine raises KeyError with this text.
    return absl::InvalidArgumentError(
        "launcher 'mpi': The environment variable MASTER_ADDR is not set");
  }
  DK_ASSIGN_OR_RETURN(info.master_port, Optional(env, launcher, "MASTER_PORT",
                                                 kDefaultMasterPort));
  PlaceStore(env, info.master_port, &info);
  DK_RETURN_IF_ERROR(Validate(info));
  return info;
}

}  // namespace

absl::StatusOr<RendezvousInfo> ParseMpiPlacement(const Environment& env) {
  const Launcher launcher = Launcher::kMpi;
  RendezvousInfo info;
  info.launcher = launcher;
  if (env.Has("OMPI_COMM_WORLD_RANK") || !env.Has("PMI_RANK")) {
    DK_ASSIGN_OR_RETURN(info.rank,
                        Required(env, launcher, "OMPI_COMM_WORLD_RANK"));
    DK_ASSIGN_OR_RETURN(info.world_size,
                        Required(env, launcher, "OMPI_COMM_WORLD_SIZE"));
    DK_ASSIGN_OR_RETURN(info.local_rank,
                        Required(env, launcher, "OMPI_COMM_WORLD_LOCAL_RANK"));
    DK_ASSIGN_OR_RETURN(
        info.local_world_size,
        Optional(env, launcher, "OMPI_COMM_WORLD_LOCAL_SIZE", info.world_size));
    // Not OMPI_COMM_WORLD_NODE_RANK: that is this process's rank among
    // its node's processes (rank 1 of `mpirun -np 2` on one host has 1),
    // not the node's index, which Open MPI does not export.
    info.node_rank = NodeRankOfBlocks(info);
  } else {
    // MPICH / Intel MPI / Hydra style.
    DK_ASSIGN_OR_RETURN(info.rank, Required(env, launcher, "PMI_RANK"));
    DK_ASSIGN_OR_RETURN(info.world_size, Required(env, launcher, "PMI_SIZE"));
    // Hydra sets MPI_LOCALRANKID with PMI_RANK; srun's PMI plugins set
    // SLURM_LOCALID instead. Without either this rank's place on its node
    // is unknown (0 on every rank would put them all on one device), so it
    // is an error naming MPI_LOCALRANKID.
    const bool srun = !env.Get("MPI_LOCALRANKID").has_value() &&
                      env.Get("SLURM_LOCALID").has_value();
    if (srun) {
      DK_ASSIGN_OR_RETURN(info.local_rank,
                          Required(env, launcher, "SLURM_LOCALID"));
    } else {
      DK_ASSIGN_OR_RETURN(info.local_rank,
                          Required(env, launcher, "MPI_LOCALRANKID"));
    }
    DK_ASSIGN_OR_RETURN(
        info.local_world_size,
        Optional(env, launcher, "MPI_LOCALNRANKS", info.world_size));
    if (srun) {
      // srun --mpi=pmi2 sets no MPI_LOCALNRANKS: this node's index and
      // tasks come from Slurm's variables, as under launcher 'slurm'.
      DK_ASSIGN_OR_RETURN(info.node_rank,
                          Optional(env, launcher, "SLURM_NODEID", 0));
      if (!env.Has("MPI_LOCALNRANKS")) {
        DK_ASSIGN_OR_RETURN(std::optional<SlurmTasks> tasks,
                            SlurmTasksOnNode(env, launcher, info.node_rank));
        if (tasks.has_value()) info.local_world_size = tasks->count;
      }
    } else {
      info.node_rank = NodeRankOfBlocks(info);
    }
  }
  return info;
}

namespace {

constexpr EnumName<Launcher> kLauncherNames[] = {
    {Launcher::kNone, "none"},
    {Launcher::kPytorch, "pytorch"},
    {Launcher::kSlurm, "slurm"},
    {Launcher::kMpi, "mpi"},
    {Launcher::kDistrun, "distrun"}};

}  // namespace

absl::string_view LauncherName(Launcher launcher) {
  return NameIn(kLauncherNames, launcher, "invalid");
}

absl::StatusOr<Launcher> ParseLauncher(absl::string_view name) {
  if (std::optional<Launcher> launcher = ValueIn(kLauncherNames, name)) {
    return *launcher;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Invalid launcher type: ", name));
}

Launcher InferLauncher(const Environment& env) {
  if (env.Has("WORLD_SIZE")) return Launcher::kPytorch;
  if (env.Has("SLURM_NTASKS")) return Launcher::kSlurm;
  if (env.Has("OMPI_COMM_WORLD_LOCAL_RANK")) return Launcher::kMpi;
  return Launcher::kNone;
}

absl::StatusOr<RendezvousInfo> ParseRendezvous(Launcher launcher,
                                               const Environment& env,
                                               const ParseOptions& options) {
  switch (launcher) {
    case Launcher::kNone:
      return RendezvousInfo{};
    case Launcher::kPytorch:
    case Launcher::kDistrun:
      return ParsePytorch(launcher, env);
    case Launcher::kSlurm:
      return ParseSlurm(env, options);
    case Launcher::kMpi:
      return ParseMpi(env);
  }
  return absl::InvalidArgumentError("unknown launcher");
}

std::string JoinHostPort(absl::string_view host, int port) {
  const bool v6 = absl::StrContains(host, ':') && !absl::StartsWith(host, "[");
  return v6 ? absl::StrCat("[", host, "]:", port)
            : absl::StrCat(host, ":", port);
}

std::string RendezvousInfo::DebugString() const {
  return absl::StrCat("launcher=", LauncherName(launcher), " rank=", rank, "/",
                      world_size, " local_rank=", local_rank, "/",
                      local_world_size, " node_rank=", node_rank,
                      " store=", store_address, host_store ? " (hosting)" : "");
}

std::map<std::string, std::string> TorchrunVariables(
    const RendezvousInfo& info) {
  std::map<std::string, std::string> vars = {
      {"RANK", absl::StrCat(info.rank)},
      {"WORLD_SIZE", absl::StrCat(info.world_size)},
      {"LOCAL_RANK", absl::StrCat(info.local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(info.local_world_size)},
  };
  if (!info.master_addr.empty()) vars["MASTER_ADDR"] = info.master_addr;
  if (info.master_port > 0)
    vars["MASTER_PORT"] = absl::StrCat(info.master_port);
  return vars;
}

}  // namespace distkit
