#include "cc/dist_api/dist.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/mpi/mpi_job_store.h"
#include "cc/core/bench_without.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/dist_api/job_watch.h"
#include "cc/dist_api/object_collectives.h"
#include "cc/group/grow.h"
#include "cc/group/shrink.h"
#include "cc/store/call_deadline.h"
#include "cc/store/hash_store.h"
#include "cc/store/prefix_store.h"
#include "cc/store/store_server.h"
#include "cc/store/tcp_store.h"

namespace distkit {
namespace dist {
namespace {

struct State {
  absl::Mutex mu;
  std::unique_ptr<StoreServer> server;  // when this rank hosts the store
  std::shared_ptr<Store> store;
  std::shared_ptr<ProcessGroup> world;
  std::shared_ptr<ProcessGroup> local;
  bool local_from_launcher = false;  // InitLocalGroupFromLauncher made it
  int local_rank = 0;
  int worlds_joined = 0;  // keys each world's rendezvous apart
  int world_size = 1;
  bool remote_store = false;        // another process hosts `store`
  std::unique_ptr<JobWatch> watch;  // the launcher's and the store's liveness
};

State& GetState() {
  static State* state = new State();
  return *state;
}

constexpr char kNoLocalGroup[] =
    "Local process group is not created, please use `init_local_group` to "
    "setup "
    "local process group.";

// Before any rank connects: a backend this process cannot run (nccl without
// a GPU or libnccl) fails every rank within milliseconds with the same
// message, instead of one rank failing and the others waiting for it.
absl::Status CheckBackend(const std::string& backend) {
  if (FindBackend(backend) != nullptr) {
    absl::Status can_run = BackendCanRunHere(backend);
    if (can_run.ok()) return absl::OkStatus();
    return Annotate(can_run, "init_dist");
  }
  if (backend == "gloo" || backend == "mpi" || backend == "nccl" ||
      backend == "cpu:gloo,cuda:nccl") {
    return absl::FailedPreconditionError(absl::StrCat(
        "backend '", backend, "' is not available in this build (available: ",
        absl::StrJoin(RegisteredBackends(), ", "), ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown backend '", backend, "' (expected gloo, nccl or mpi)"));
}

// mmengine's init_dist exports torchrun's variables under Slurm and MPI; so
// does every language's init here (Python mirrors them into os.environ).
void ExportTorchrunVariables(const RendezvousInfo& info) {
  for (const auto& [name, value] : TorchrunVariables(info)) {
    setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
  }
}

}  // namespace

absl::StatusOr<int> ReplacementNumber() {
  const char* value = std::getenv("DISTKIT_REPLACEMENT");
  if (value == nullptr || *value == '\0') return 0;
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_dist: DISTKIT_REPLACEMENT='", value,
                     "' is not a replacement number (0, 1, 2, ...)"));
  }
  return n;
}

namespace {

// The node-local group, made within `connect_timeout` (zero: the op
// timeout); defined below, beside the public functions they serve.
absl::Status MakeLocalGroup(int node_rank, int num_gpus_per_node,
                            absl::Duration connect_timeout);
absl::Status LocalGroupFromLauncher(absl::Duration connect_timeout);

absl::Duration ConnectTimeout(const InitOptions& options) {
  return options.connect_timeout > absl::ZeroDuration()
             ? options.connect_timeout
             : options.timeout;
}

// `init_deadline`: the caller's bound on init's store calls (the innermost
// store deadline on this thread), which a replacement's join lifts.
absl::Status Join(std::shared_ptr<Store> store,
                  std::unique_ptr<StoreServer> server, int rank, int size,
                  const InitOptions& options, const std::string& hostname,
                  std::optional<ScopedStoreDeadline>& init_deadline,
                  int local_rank = 0) {
  State& s = GetState();
  absl::MutexLock lock(&s.mu);
  if (s.world != nullptr) {
    return absl::FailedPreconditionError(
        "init_dist: this process is already initialized; call destroy first");
  }
  GroupOptions group_options;
  group_options.backend = options.backend;
  group_options.timeout = options.timeout;
  group_options.connect_timeout = ConnectTimeout(options);
  group_options.hostname = hostname;
  group_options.local_rank = local_rank;
  // The n-th world this process joins rendezvouses under "world<n>/": a job
  // that shuts down and initializes again on the same store (distrun's
  // outlives every world) must never read the previous world's keys. Every
  // rank makes the same sequence of init calls, so they agree on n.
  const int generation = s.worlds_joined + 1;
  auto world_store =
      std::make_shared<PrefixStore>(absl::StrCat("world", generation), store);
  DK_ASSIGN_OR_RETURN(int replacement, ReplacementNumber());
  if (replacement > 0) {
    // A new process in place of a lost rank: the world's rendezvous is long
    // over, so it joins the survivors' grow instead (cc/group/grow.h). The
    // grow bounds its own store calls: the timeout, then a margin to seal
    // the generation as failed. Under init's bound, which ends with the
    // timeout, that seal could never be written.
    init_deadline.reset();
    DK_ASSIGN_OR_RETURN(s.world,
                        JoinGrownWorld(std::move(world_store), rank, size,
                                       group_options, ConnectTimeout(options)));
    // Counted once joined: the survivors met in the world they all joined,
    // so a replacement that retries init must look for them there again.
    s.worlds_joined = generation;
  } else {
    // Counted even when it fails: every rank makes the same calls, so a
    // retry of all of them meets under the next prefix, apart from any
    // keys the failed one left.
    s.worlds_joined = generation;
    DK_ASSIGN_OR_RETURN(
        s.world, ProcessGroup::CreateWorld(std::move(world_store), rank, size,
                                           group_options));
  }
  s.store = std::move(store);
  s.server = std::move(server);
  s.local_rank = local_rank;
  s.world_size = size;
  return absl::OkStatus();
}

// What a JobWatch does before it stops this rank: every default group's
// waits end, with the reason.
void AbortForLostJob(const absl::Status&) {
  State& s = GetState();
  std::shared_ptr<ProcessGroup> world, local;
  {
    absl::MutexLock lock(&s.mu);
    world = s.world;
    local = s.local;
  }
  if (local != nullptr) local->Abort();
  if (world != nullptr) world->Abort();
}

// Watches the launcher and, when another process hosts it, the store, for
// as long as this world lives (job_watch.h).
void StartJobWatch(std::shared_ptr<Store> remote_store,
                   const std::string& store_address) {
  JobWatch::Options options =
      JobWatch::FromEnvironment(remote_store, store_address);
  options.on_lost = AbortForLostJob;
  // Group creation already refused a malformed value (ProcessGroup).
  absl::StatusOr<BenchWithout> without = BenchWithoutFromEnvironment();
  std::unique_ptr<JobWatch> watch;
  if (!without.ok() || !without->watch_threads) {
    watch = JobWatch::Start(std::move(options));
  }
  State& s = GetState();
  absl::MutexLock lock(&s.mu);
  s.remote_store = remote_store != nullptr;
  s.watch = std::move(watch);
}

// How `launcher`'s variables are read: the Slurm port argument, and
// mmengine's rule that under Slurm without SLURM_LOCALID the local rank is
// the rank modulo the GPUs (counted only then: it opens the CUDA runtime).
ParseOptions ParseOptionsFor(Launcher launcher, const Environment& env,
                             std::optional<int> port) {
  ParseOptions parse;
  parse.port = port;
  if (launcher == Launcher::kSlurm && !env.Has("SLURM_LOCALID")) {
    parse.num_devices = CudaDeviceCount();
  }
  return parse;
}

// Whether the mpi backend finds the job's store through MPI itself
// (mpi_job_store.h): only under mpirun (launcher 'mpi') when MASTER_ADDR
// names none (unset or empty, as ParseRendezvous reads it).
bool MpiFindsTheStore(Launcher launcher, const Environment& env) {
  return launcher == Launcher::kMpi &&
         env.Get("MASTER_ADDR").value_or("").empty();
}

// Every dk_init makes the node-local group where the launcher's layout
// gives one, on every rank whatever its language (so a job whose ranks are
// written in different languages makes the same calls). Not determinable:
// no group, and get_local_rank() raises until init_local_group.
absl::Status LocalGroupAfterJoin(const InitOptions& options) {
  absl::Status s = LocalGroupFromLauncher(ConnectTimeout(options));
  return absl::IsFailedPrecondition(s) ? absl::OkStatus() : s;
}

}  // namespace

absl::Status InitDist(absl::string_view launcher_name,
                      const InitOptions& options) {
  // Init as a whole is bounded by its connect timeout (by default the op
  // timeout): every store call under it (rendezvous, Gloo's address
  // exchange, the shared-memory decision) ends by then, even when the store
  // host dies or freezes during init.
  // (A replacement's join bounds its own: Join lifts this one for it.)
  std::optional<ScopedStoreDeadline> init_deadline;
  init_deadline.emplace(absl::Now() + ConnectTimeout(options));
  DK_ASSIGN_OR_RETURN(Launcher launcher, ParseLauncher(launcher_name));
  if (launcher == Launcher::kNone) {
    return absl::InvalidArgumentError("Invalid launcher type: none");
  }
  DK_RETURN_IF_ERROR(CheckBackend(options.backend));
  if (options.backend == "mpi" &&
      MpiFindsTheStore(launcher, Environment::FromProcess())) {
    // MPI knows the ranks and connects them itself: where mpirun names no
    // store (MASTER_ADDR), rank 0 serves one and MPI tells the others where
    // (mpi_job_store.h), so that what needs a store shared across ranks
    // (torch's new_group, the job watch) works as with one. mpirun's
    // variables name this rank; MPI_COMM_WORLD must agree. Other launchers
    // (slurm, pytorch) name their store and ranks with their own variables,
    // read below for the mpi backend as for any other.
    DK_ASSIGN_OR_RETURN(RendezvousInfo placement,
                        ParseMpiPlacement(Environment::FromProcess()));
    ExportTorchrunVariables(placement);
    DK_ASSIGN_OR_RETURN(
        MpiJobStore job,
        ConnectJobStoreOverMpi(placement.rank, placement.world_size,
                               ConnectTimeout(options)));
    const bool watch =
        job.shared && job.server == nullptr && placement.world_size > 1;
    DK_RETURN_IF_ERROR(Join(job.store, std::move(job.server), placement.rank,
                            placement.world_size, options, "", init_deadline,
                            placement.local_rank));
    StartJobWatch(watch ? job.store : nullptr, job.address);
    return LocalGroupAfterJoin(options);
  }
  Environment env = Environment::FromProcess();
  DK_ASSIGN_OR_RETURN(
      RendezvousInfo info,
      ParseRendezvous(launcher, env,
                      ParseOptionsFor(launcher, env, options.port)));
  if (launcher == Launcher::kSlurm || launcher == Launcher::kMpi) {
    ExportTorchrunVariables(info);
  }
  DK_ASSIGN_OR_RETURN(int replacement, ReplacementNumber());
  if (replacement > 0 && info.host_store) {
    return absl::FailedPreconditionError(absl::StrCat(
        "init_dist: rank ", info.rank, " is replacement ", replacement,
        " (DISTKIT_REPLACEMENT) but would host the job's store, which died "
        "with the rank it replaces; replacements need a store that outlives "
        "ranks (distrun's)"));
  }
  std::unique_ptr<StoreServer> server;
  if (info.host_store) {
    // Without distrun, rank 0 serves the store; it binds the master address.
    absl::StatusOr<std::unique_ptr<StoreServer>> started =
        StoreServer::Start({info.store_address, info.token});
    if (!started.ok()) return Annotate(started.status(), "init_dist: rank 0");
    server = *std::move(started);
  }
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect({info.store_address, info.token, Store::kDefaultTimeout,
                         Store::kDefaultTimeout});
  if (!store.ok()) {
    return Annotate(store.status(),
                    absl::StrCat("init_dist: rank ", info.rank));
  }
  std::shared_ptr<Store> job_store(*std::move(store));
  const bool remote = server == nullptr;
  // Each group's Gloo device listens on the interface that routes to the
  // store, found without name lookups (cc/comm/gloo/listen_address.h).
  DK_RETURN_IF_ERROR(Join(job_store, std::move(server), info.rank,
                          info.world_size, options, /*hostname=*/"",
                          init_deadline, info.local_rank));
  StartJobWatch(remote && info.world_size > 1 ? job_store : nullptr,
                info.store_address);
  // The survivors dropped their node-local group when they shrank or grew:
  // a replacement makes none either (init_local_group makes it on all).
  if (replacement > 0) return absl::OkStatus();
  return LocalGroupAfterJoin(options);
}

absl::StatusOr<RendezvousInfo> LauncherInfo(absl::string_view launcher_name) {
  Environment env = Environment::FromProcess();
  Launcher launcher = InferLauncher(env);
  if (!launcher_name.empty()) {
    DK_ASSIGN_OR_RETURN(launcher, ParseLauncher(launcher_name));
  }
  // The test dk_init's mpi path makes: no MASTER_ADDR, no store address
  // (rank 0 serves the store there, found through MPI: mpi_job_store.h).
  if (MpiFindsTheStore(launcher, env)) {
    return ParseMpiPlacement(env);
  }
  return ParseRendezvous(launcher, env,
                         ParseOptionsFor(launcher, env, std::nullopt));
}

absl::Status InitDistWithStore(std::shared_ptr<Store> store, int rank, int size,
                               const InitOptions& options) {
  std::optional<ScopedStoreDeadline> init_deadline;
  init_deadline.emplace(absl::Now() + ConnectTimeout(options));
  DK_RETURN_IF_ERROR(CheckBackend(options.backend));
  return Join(std::move(store), nullptr, rank, size, options, "",
              init_deadline);
}

void DestroyDist() {
  State& s = GetState();
  std::shared_ptr<ProcessGroup> world, local;
  std::unique_ptr<StoreServer> server;
  std::unique_ptr<JobWatch> watch;
  std::shared_ptr<Store> store;
  bool remote_store = false;
  int world_size = 1;
  {
    absl::MutexLock lock(&s.mu);
    world = std::move(s.world);
    local = std::move(s.local);
    server = std::move(s.server);
    store = std::move(s.store);
    watch = std::move(s.watch);
    remote_store = s.remote_store;
    world_size = s.world_size;
    s.remote_store = false;
  }
  // Leaving normally: the store's host tells the others it closes, the
  // others count themselves out, so no watch takes this for a lost job.
  const bool host_closed = watch != nullptr && watch->store_closing();
  watch.reset();
  if (server != nullptr) {
    AnnounceStoreClosing(server->state(), world_size - 1);
  } else if (remote_store && !host_closed && store != nullptr) {
    CountRankLeft(*store);
  }
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> ShrinkDefaultGroup(
    absl::Duration settle) {
  State& s = GetState();
  std::shared_ptr<ProcessGroup> world;
  {
    absl::MutexLock lock(&s.mu);
    world = s.world;
  }
  if (world == nullptr) {
    return absl::FailedPreconditionError(
        "shrink: not initialized; call init_dist first");
  }
  DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> shrunk,
                      ShrinkGroup(*world, settle));
  absl::MutexLock lock(&s.mu);
  s.world = shrunk;
  s.local.reset();
  s.local_from_launcher = false;
  return shrunk;
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> GrowDefaultGroup(
    int world_size, absl::Duration timeout) {
  State& s = GetState();
  std::shared_ptr<ProcessGroup> world;
  {
    absl::MutexLock lock(&s.mu);
    world = s.world;
    if (world_size <= 0) world_size = s.world_size;
  }
  if (world == nullptr) {
    return absl::FailedPreconditionError(
        "grow: not initialized; call init_dist first");
  }
  DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> grown,
                      GrowGroup(*world, world_size, timeout));
  absl::MutexLock lock(&s.mu);
  s.world = grown;
  s.local.reset();
  s.local_from_launcher = false;
  return grown;
}

int JobWorldSize() {
  State& s = GetState();
  absl::MutexLock lock(&s.mu);
  return s.world != nullptr ? s.world_size : 1;
}

bool IsDistributed() { return GetDefaultGroup() != nullptr; }

Device GetDevice() {
  State& s = GetState();
  int local_rank = 0;
  {
    absl::MutexLock lock(&s.mu);
    local_rank = s.local_rank;
  }
  return DefaultDevice(local_rank);
}

std::shared_ptr<ProcessGroup> GetDefaultGroup() {
  State& s = GetState();
  absl::MutexLock lock(&s.mu);
  return s.world;
}

std::shared_ptr<Store> GetStore() {
  State& s = GetState();
  absl::MutexLock lock(&s.mu);
  return s.store;
}

// Each query holds the default group for the call: a dk_shutdown on another
// thread must not free it in between (it did: GetRank after IsDistributed).
std::optional<std::string> GetBackend(const ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> world = GetDefaultGroup();
  if (world == nullptr) return std::nullopt;
  return (group != nullptr ? group : world.get())->backend_name();
}

int GetWorldSize(const ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> world = GetDefaultGroup();
  if (world == nullptr) return 1;
  return (group != nullptr ? group : world.get())->size();
}

int GetRank(const ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> world = GetDefaultGroup();
  if (world == nullptr) return 0;
  return (group != nullptr ? group : world.get())->rank();
}

std::pair<int, int> GetDistInfo(const ProcessGroup* group) {
  return {GetRank(group), GetWorldSize(group)};
}

bool IsMainProcess(const ProcessGroup* group) { return GetRank(group) == 0; }

absl::Status Barrier(const ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> world = GetDefaultGroup();
  if (world == nullptr) return absl::OkStatus();
  return const_cast<ProcessGroup*>(group != nullptr ? group : world.get())
      ->Barrier();
}

Device GetCommDevice(const ProcessGroup* group) {
  std::shared_ptr<ProcessGroup> world = GetDefaultGroup();
  if (world == nullptr) return Device::Cpu();
  return (group != nullptr ? group : world.get())->comm_device();
}

absl::Status InitLocalGroup(int node_rank, int num_gpus_per_node) {
  return MakeLocalGroup(node_rank, num_gpus_per_node, absl::ZeroDuration());
}

namespace {

absl::Status MakeLocalGroup(int node_rank, int num_gpus_per_node,
                            absl::Duration connect_timeout) {
  std::shared_ptr<ProcessGroup> world = GetDefaultGroup();
  if (world == nullptr) {
    return absl::FailedPreconditionError("init_local_group: not distributed");
  }
  if (num_gpus_per_node < 1 || node_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "init_local_group: node_rank ", node_rank, " and num_gpus_per_node ",
        num_gpus_per_node, " are invalid"));
  }
  // In int64, and checked before the list is built: in int the product can
  // wrap, and a huge layout would push ~2^30 ranks before NewGroup saw them.
  const int64_t end =
      (static_cast<int64_t>(node_rank) + 1) * int64_t{num_gpus_per_node};
  if (end > world->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "init_local_group: node_rank ", node_rank, " and num_gpus_per_node ",
        num_gpus_per_node, " need ranks up to ", end - 1,
        ", beyond the world size ", world->size()));
  }
  std::vector<int> ranks;
  for (int r = node_rank * num_gpus_per_node; r < end; ++r) {
    ranks.push_back(r);
  }
  State& s = GetState();
  {
    absl::MutexLock lock(&s.mu);
    if (s.local != nullptr && !s.local_from_launcher) {
      return absl::FailedPreconditionError(
          "init_local_group: the local process group already exists");
    }
    if (s.local != nullptr && s.local->global_ranks() == ranks) {
      s.local_from_launcher = false;  // the caller's now
      return absl::OkStatus();
    }
  }
  GroupOptions options;
  options.backend = world->backend_name();
  options.timeout = world->timeout();
  options.connect_timeout = connect_timeout;
  // One group per node and layout (a replaced group's name is not reused).
  options.name = absl::StrCat("local", node_rank, "x", num_gpus_per_node);
  DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> local,
                      world->NewGroup(ranks, options));
  absl::MutexLock lock(&s.mu);
  s.local = std::move(local);
  s.local_from_launcher = false;
  return absl::OkStatus();
}

// The node this rank runs on, as the launcher names it (SLURM_NODEID), else
// the host name.
std::string NodeIdentity() {
  if (const char* node_id = std::getenv("SLURM_NODEID")) {
    return absl::StrCat("slurm node ", node_id);
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat("host ", host);
}

// torchrun's and distrun's layout, from this rank's variables alone (no
// communication): GROUP_RANK g and LOCAL_WORLD_SIZE n with this rank in
// [g n, (g + 1) n). 0 when they are not set or do not fit. The launcher
// sets them on every rank alike, so the ranks decide alike (were they set
// on some ranks only, the others' all_gather would meet their next
// collective and fail as a mismatch naming the ranks, or time out).
int LayoutFromEnvironment(int rank, int size, int* node) {
  const char* group_rank = std::getenv("GROUP_RANK");
  const char* local_size = std::getenv("LOCAL_WORLD_SIZE");
  int g = 0, n = 0;
  if (group_rank == nullptr || local_size == nullptr ||
      !absl::SimpleAtoi(group_rank, &g) || !absl::SimpleAtoi(local_size, &n) ||
      n < 1 || size % n != 0 || rank / n != g) {
    return 0;
  }
  *node = g;
  return n;
}

absl::Status LocalGroupFromLauncher(absl::Duration connect_timeout) {
  std::shared_ptr<ProcessGroup> world = GetDefaultGroup();
  if (world == nullptr) {
    return absl::FailedPreconditionError("init_local_group: not distributed");
  }
  const int size = world->size();
  int node = 0;
  int per_node = LayoutFromEnvironment(world->rank(), size, &node);
  if (per_node == 0) {
    // No launcher layout: the ranks compare where they run (one
    // all_gather over the world).
    DK_ASSIGN_OR_RETURN(std::vector<std::string> nodes,
                        AllGatherObject(NodeIdentity(), world.get()));
    const std::string& mine = nodes[world->rank()];
    per_node = static_cast<int>(std::count(nodes.begin(), nodes.end(), mine));
    // Consecutive blocks of per_node ranks, one node each.
    bool blocks = size % per_node == 0;
    absl::flat_hash_set<std::string> seen;
    for (int r = 0; blocks && r < size; ++r) {
      blocks = r % per_node == 0 ? seen.insert(nodes[r]).second
                                 : nodes[r] == nodes[r - 1];
    }
    if (!blocks) {
      return absl::FailedPreconditionError(absl::StrCat(
          "init_local_group: the nodes do not hold consecutive blocks of ",
          per_node, " ranks; call init_local_group"));
    }
    node = world->rank() / per_node;
  }
  State& s = GetState();
  if (per_node == size) {
    // One node: the local group is the world itself (no second set of
    // connections).
    absl::MutexLock lock(&s.mu);
    if (s.local != nullptr && !s.local_from_launcher) {
      return absl::FailedPreconditionError(
          "init_local_group: the local process group already exists");
    }
    s.local = world;
    s.local_from_launcher = true;
    return absl::OkStatus();
  }
  DK_RETURN_IF_ERROR(MakeLocalGroup(node, per_node, connect_timeout));
  absl::MutexLock lock(&s.mu);
  s.local_from_launcher = true;
  return absl::OkStatus();
}

}  // namespace

absl::Status InitLocalGroupFromLauncher() {
  return LocalGroupFromLauncher(absl::ZeroDuration());
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> GetLocalGroup() {
  if (!IsDistributed()) return std::shared_ptr<ProcessGroup>();
  State& s = GetState();
  absl::MutexLock lock(&s.mu);
  if (s.local == nullptr) return absl::FailedPreconditionError(kNoLocalGroup);
  return s.local;
}

absl::StatusOr<int> GetLocalRank() {
  if (!IsDistributed()) return 0;
  DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> local, GetLocalGroup());
  return local->rank();
}

absl::StatusOr<int> GetLocalSize() {
  if (!IsDistributed()) return 1;
  DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> local, GetLocalGroup());
  return local->size();
}

}  // namespace dist
}  // namespace distkit
