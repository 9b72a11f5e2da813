// The C ABI's sections on joining the job, groups and what runs on them, in
// the header's order: "Launcher" (the launcher's view dk_init reads),
// "Groups" (joining the job, group handles and what they tell, subgroups,
// shrinking after a failure), "Work", "Local group", "Parallel state" and
// "Devices". One translation unit for the six: each would parse the same
// group headers again.
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "capi/entry_point.h"
#include "cc/core/data_type.h"
#include "cc/core/device.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/parallel_state.h"
#include "cc/group/grow.h"
#include "cc/group/process_group.h"
#include "cc/group/shrink.h"
#include "cc/launch/launcher.h"
#include "distkit/distkit.h"

namespace distkit {
namespace capi {
namespace {

void InitConfigDefaults(dk_init_config_t* config) {
  config->backend = "gloo";
  config->timeout_ms = 1800000;
}

void GroupOptionsDefaults(dk_group_options_t*) {}  // all zero

absl::StatusOr<dist::InitOptions> ReadInitConfig(
    const dk_init_config_t* config) {
  DK_ASSIGN_OR_RETURN(
      dk_init_config_t c,
      ReadVersionedStruct(
          config, &InitConfigDefaults, "dk_init_config",
          {DK_FIELD_SPAN(dk_init_config_t, backend),
           DK_FIELD_SPAN(dk_init_config_t, timeout_ms),
           DK_FIELD_SPAN(dk_init_config_t, connect_timeout_ms)}));
  dist::InitOptions options;
  options.backend = c.backend != nullptr ? c.backend : "gloo";
  if (c.timeout_ms <= 0)
    return absl::InvalidArgumentError("config: timeout_ms must be > 0");
  options.timeout = absl::Milliseconds(c.timeout_ms);
  if (c.connect_timeout_ms > 0) {
    options.connect_timeout = absl::Milliseconds(c.connect_timeout_ms);
  }
  return options;
}

// What dk_init and dk_init_with_store share after their own argument
// checks: the config read, `init(options)` run, the new world handed back.
template <typename Init>
absl::Status JoinWorld(const dk_init_config_t* config, dk_group_t** world_out,
                       Init&& init) {
  DK_ASSIGN_OR_RETURN(dist::InitOptions options, ReadInitConfig(config));
  DK_RETURN_IF_ERROR(init(options));
  *world_out = new dk_group(dist::GetDefaultGroup());
  return absl::OkStatus();
}

// The group whose strings dk_group_backend and dk_group_name return: none
// for a destroyed handle, else the handle's, else the default group (none
// outside a job). Held while the caller reads it: a shrink, grow or
// dk_shutdown on another thread may replace the default group meanwhile.
std::shared_ptr<const ProcessGroup> NamedGroup(const dk_group_t* group) {
  if (group != nullptr) return group->Get();  // null once destroyed
  return dist::GetDefaultGroup();
}

ABSL_CONST_INIT absl::Mutex interned_mu(absl::kConstInit);

// `text` as a C string that lives until the process exits, each distinct
// text kept once: dk_group_name and dk_group_backend hand out names of
// groups that a dk_shutdown, shrink or destroy frees while the caller may
// still hold the string (a job has a few names: its backends, "world" and
// one per subgroup). Throws std::bad_alloc where a new text finds no memory.
const char* Interned(absl::string_view text) {
  // Never destroyed, so also valid in code that runs at exit.
  static auto* const texts = new std::set<std::string, std::less<>>();
  absl::MutexLock lock(&interned_mu);
  auto it = texts->find(text);
  if (it == texts->end()) it = texts->emplace(text).first;
  return it->c_str();
}

// The subgroup of `parent` (NULL: the default group) that `make(parent,
// ranks)` creates from ranks[0, num_ranks), after checking that the list is
// no longer than the parent.
template <typename Make>
absl::StatusOr<dk_group*> NewSubgroup(dk_group_t* parent, const int32_t* ranks,
                                      size_t num_ranks, Make&& make) {
  DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> p, GroupOf(parent));
  if (num_ranks > static_cast<size_t>(p->size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "new_group: num_ranks is ", num_ranks, ", more than group '", p->name(),
        "' has (", p->size(), ")"));
  }
  DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g,
                      make(*p, std::vector<int>(ranks, ranks + num_ranks)));
  return new dk_group(std::move(g));
}

// A named subgroup's name keys its rendezvous below the parent's: one path
// component.
absl::Status CheckSubgroupName(const char* name) {
  if (*name == '\0' || std::strchr(name, '/') != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "new_group: the subgroup name '", name, "' is empty or has a '/'"));
  }
  return absl::OkStatus();
}

// What a subgroup of `parent` starts from: the parent's backend and
// timeout, no connect timeout of its own (init's is not a subgroup's); with
// `name`, made by its members alone (dk_group_new_named), else collectively
// over the parent and numbered (dk_group_new).
distkit::GroupOptions SubgroupOptionsOf(const ProcessGroup& parent,
                                        const char* name) {
  distkit::GroupOptions options;
  options.backend = parent.backend_name();
  options.timeout = parent.timeout();
  if (name != nullptr) {
    options.name = absl::StrCat("named-", name);
    options.members_only = true;
  }
  return options;
}

}  // namespace
}  // namespace capi
}  // namespace distkit

// The C ABI, section "Launcher": this process's place in the job, as the
// launcher's environment gives it.

namespace distkit {
namespace capi {
namespace {

// `info` as one malloc'd block: the struct, then its strings.
absl::StatusOr<dk_launcher_info_t*> ReturnLauncherInfo(
    const RendezvousInfo& info) {
  const absl::string_view name = LauncherName(info.launcher);
  const std::string* strings[] = {&info.master_addr, &info.store_address};
  size_t total = sizeof(dk_launcher_info_t) + name.size() + 1;
  for (const std::string* s : strings) total += s->size() + 1;
  char* block = static_cast<char*>(std::malloc(total));
  if (block == nullptr) return absl::ResourceExhaustedError("out of memory");
  dk_launcher_info_t* out = reinterpret_cast<dk_launcher_info_t*>(block);
  std::memset(out, 0, sizeof(*out));
  char* cursor = block + sizeof(dk_launcher_info_t);
  auto place = [&cursor](absl::string_view text) {
    char* at = cursor;
    std::memcpy(at, text.data(), text.size());
    at[text.size()] = '\0';
    cursor += text.size() + 1;
    return at;
  };
  out->struct_size = sizeof(dk_launcher_info_t);
  out->launcher = place(name);
  out->rank = info.rank;
  out->world_size = info.world_size;
  out->local_rank = info.local_rank;
  out->local_world_size = info.local_world_size;
  out->node_rank = info.node_rank;
  out->master_port = info.master_port;
  out->master_addr = place(info.master_addr);
  out->store_address = place(info.store_address);
  out->hosts_store = info.host_store ? 1 : 0;
  return out;
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::capi::GroupOptionsDefaults;
using ::distkit::capi::InitConfigDefaults;

extern "C" {

const char* dk_launcher_infer(void) {
  // No exception may cross the ABI (reading the environment allocates).
  try {
    // LauncherName's names are string literals: static and NUL-terminated.
    return distkit::LauncherName(
               distkit::InferLauncher(distkit::Environment::FromProcess()))
        .data();
  } catch (...) {
    return "none";
  }
}

dk_status_t dk_launcher_info(const char* launcher, dk_launcher_info_t** out,
                             dk_error_t** err) {
  return distkit::capi::Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(distkit::capi::NotNull(out, "out"));
    *out = nullptr;
    if (launcher != nullptr && *launcher == '\0') {
      // The C++ API reads "" as "infer"; the ABI says NULL for that.
      return absl::InvalidArgumentError("Invalid launcher type: ");
    }
    DK_ASSIGN_OR_RETURN(
        distkit::RendezvousInfo info,
        distkit::dist::LauncherInfo(launcher != nullptr ? launcher : ""));
    DK_ASSIGN_OR_RETURN(*out, distkit::capi::ReturnLauncherInfo(info));
    return absl::OkStatus();
  });
}

}  // extern "C"

using ::distkit::capi::CheckSubgroupName;
using ::distkit::capi::Interned;
using ::distkit::capi::JoinWorld;
using ::distkit::capi::NamedGroup;
using ::distkit::capi::NewSubgroup;
using ::distkit::capi::ReadVersionedStruct;
using ::distkit::capi::SubgroupOptionsOf;

extern "C" {

void dk_init_config_init(dk_init_config_t* config) {
  InitVersionedStruct(config,
                      DK_SIZE_THROUGH(dk_init_config_t, connect_timeout_ms),
                      &InitConfigDefaults);
}

void dk_init_config_init_sized(dk_init_config_t* config, size_t size) {
  InitVersionedStruct(config, size, &InitConfigDefaults);
}

dk_status_t dk_init(const char* launcher, const dk_init_config_t* config,
                    dk_group_t** world_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(launcher, "launcher"));
    DK_RETURN_IF_ERROR(NotNull(world_out, "world_out"));
    return JoinWorld(config, world_out, [&](const auto& options) {
      return distkit::dist::InitDist(launcher, options);
    });
  });
}

dk_status_t dk_init_with_store(dk_store_t* store, int32_t rank, int32_t size,
                               const dk_init_config_t* config,
                               dk_group_t** world_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(world_out, "world_out"));
    return JoinWorld(config, world_out, [&](const auto& options) {
      return distkit::dist::InitDistWithStore(store->rep, rank, size, options);
    });
  });
}

void dk_shutdown(void) {
  // DestroyDist forgets the default group before anything that allocates
  // (telling the store this rank left), so even a throw there shuts down.
  BestEffort([] { distkit::dist::DestroyDist(); });
}

int32_t dk_is_distributed(void) {
  return NoThrow(0, [] { return distkit::dist::IsDistributed() ? 1 : 0; });
}

int32_t dk_group_rank(const dk_group_t* group) {
  return NoThrow(-1, [&]() -> int32_t {
    if (group != nullptr) {
      const auto g = group->Get();
      return g != nullptr ? g->rank() : -1;
    }
    return distkit::dist::GetRank();
  });
}

int32_t dk_group_size(const dk_group_t* group) {
  return NoThrow(-1, [&]() -> int32_t {
    if (group != nullptr) {
      const auto g = group->Get();
      return g != nullptr ? g->size() : -1;
    }
    return distkit::dist::GetWorldSize();
  });
}

int32_t dk_group_global_rank(const dk_group_t* group, int32_t group_rank) {
  return NoThrow(-1, [&]() -> int32_t {
    if (group != nullptr) {
      const auto g = group->Get();
      if (g == nullptr) return -1;
      const auto& ranks = g->global_ranks();
      return group_rank >= 0 && group_rank < static_cast<int32_t>(ranks.size())
                 ? ranks[group_rank]
                 : -1;
    }
    return group_rank >= 0 && group_rank < distkit::dist::GetWorldSize()
               ? group_rank
               : -1;
  });
}

const char* dk_group_backend(const dk_group_t* group) {
  return NoThrow<const char*>(nullptr, [&]() -> const char* {
    std::shared_ptr<const ProcessGroup> g = NamedGroup(group);
    return g != nullptr ? Interned(g->backend_name()) : nullptr;
  });
}

const char* dk_group_name(const dk_group_t* group) {
  return NoThrow<const char*>(nullptr, [&]() -> const char* {
    std::shared_ptr<const ProcessGroup> g = NamedGroup(group);
    return g != nullptr ? Interned(g->name()) : nullptr;
  });
}

dk_status_t dk_group_new(dk_group_t* parent, const int32_t* ranks,
                         size_t num_ranks, dk_group_t** out, dk_error_t** err) {
  return NewHandle(out, err, [&]() -> absl::StatusOr<dk_group*> {
    if (num_ranks > 0) DK_RETURN_IF_ERROR(NotNull(ranks, "ranks"));
    return NewSubgroup(parent, ranks, num_ranks,
                       [](ProcessGroup& p, std::vector<int> members) {
                         return p.NewGroup(std::move(members));
                       });
  });
}

dk_status_t dk_group_new_named(dk_group_t* parent, const int32_t* ranks,
                               size_t num_ranks, const char* name,
                               dk_group_t** out, dk_error_t** err) {
  return NewHandle(out, err, [&]() -> absl::StatusOr<dk_group*> {
    DK_RETURN_IF_ERROR(NotNull(name, "name"));
    if (num_ranks > 0) DK_RETURN_IF_ERROR(NotNull(ranks, "ranks"));
    DK_RETURN_IF_ERROR(CheckSubgroupName(name));
    return NewSubgroup(parent, ranks, num_ranks,
                       [&](ProcessGroup& p, std::vector<int> members) {
                         return p.NewGroup(std::move(members),
                                           SubgroupOptionsOf(p, name));
                       });
  });
}

void dk_group_options_init(dk_group_options_t* options) {
  InitVersionedStruct(options,
                      DK_SIZE_THROUGH(dk_group_options_t, connect_timeout_ms),
                      &GroupOptionsDefaults);
}

void dk_group_options_init_sized(dk_group_options_t* options, size_t size) {
  InitVersionedStruct(options, size, &GroupOptionsDefaults);
}

dk_status_t dk_group_new_with_options(dk_group_t* parent, const int32_t* ranks,
                                      size_t num_ranks,
                                      const dk_group_options_t* options,
                                      dk_group_t** out, dk_error_t** err) {
  return NewHandle(out, err, [&]() -> absl::StatusOr<dk_group*> {
    DK_ASSIGN_OR_RETURN(
        dk_group_options_t o,
        ReadVersionedStruct(
            options, &GroupOptionsDefaults, "dk_group_options",
            {DK_FIELD_SPAN(dk_group_options_t, name),
             DK_FIELD_SPAN(dk_group_options_t, timeout_ms),
             DK_FIELD_SPAN(dk_group_options_t, connect_timeout_ms)}));
    if (num_ranks > 0) DK_RETURN_IF_ERROR(NotNull(ranks, "ranks"));
    if (o.name != nullptr) DK_RETURN_IF_ERROR(CheckSubgroupName(o.name));
    return NewSubgroup(parent, ranks, num_ranks,
                       [&](ProcessGroup& p, std::vector<int> members)
                           -> absl::StatusOr<std::shared_ptr<ProcessGroup>> {
                         distkit::GroupOptions g = SubgroupOptionsOf(p, o.name);
                         if (o.timeout_ms > 0)
                           g.timeout = absl::Milliseconds(o.timeout_ms);
                         if (o.connect_timeout_ms > 0) {
                           g.connect_timeout =
                               absl::Milliseconds(o.connect_timeout_ms);
                         }
                         return p.NewGroup(std::move(members), std::move(g));
                       });
  });
}

void dk_group_destroy(dk_group_t* group) {
  // Releases the group but keeps the small handle (see the header): later
  // calls through it fail cleanly instead of reading freed memory.
  if (group != nullptr) group->Destroy();
}

void dk_group_abort(dk_group_t* group) {
  // No status to report: as much of the abort as memory allows. The group is
  // found without GroupOf, whose error for a missing one allocates.
  BestEffort([group] {
    std::shared_ptr<ProcessGroup> g =
        group != nullptr ? group->Get() : distkit::dist::GetDefaultGroup();
    if (g != nullptr) g->Abort();
  });
}

dk_status_t dk_group_shrink(dk_group_t* group, int64_t settle_ms,
                            dk_group_t** out, dk_error_t** err) {
  return NewHandle(out, err, [&]() -> absl::StatusOr<dk_group*> {
    const absl::Duration settle =
        settle_ms < 0 ? absl::Seconds(5) : absl::Milliseconds(settle_ms);
    std::shared_ptr<ProcessGroup> shrunk;
    if (group == nullptr) {
      DK_ASSIGN_OR_RETURN(shrunk, distkit::dist::ShrinkDefaultGroup(settle));
    } else {
      DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
      DK_ASSIGN_OR_RETURN(shrunk, distkit::ShrinkGroup(*g, settle));
    }
    return new dk_group(std::move(shrunk));
  });
}

dk_status_t dk_group_grow_pending(dk_group_t* group, int32_t* pending,
                                  dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(pending, "pending"));
    std::shared_ptr<ProcessGroup> g;
    if (group == nullptr) {
      g = distkit::dist::GetDefaultGroup();
      if (g == nullptr) {
        return absl::FailedPreconditionError(
            "grow_pending: no default group (call dk_init first)");
      }
    } else {
      DK_ASSIGN_OR_RETURN(g, GroupOf(group));
    }
    DK_ASSIGN_OR_RETURN(
        bool waiting, distkit::GrowPending(*g, distkit::dist::JobWorldSize()));
    *pending = waiting ? 1 : 0;
    return absl::OkStatus();
  });
}

dk_status_t dk_group_grow(dk_group_t* group, int32_t world_size,
                          int64_t timeout_ms, dk_group_t** out,
                          dk_error_t** err) {
  return NewHandle(out, err, [&]() -> absl::StatusOr<dk_group*> {
    if (world_size < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grow: world_size ", world_size, " is negative (0: the job's)"));
    }
    std::shared_ptr<ProcessGroup> grown;
    if (group == nullptr) {
      // 0, as < 0, is the group's: a grow that may not wait could never
      // succeed, and 0 is "the default" for world_size and for Go's callers.
      const absl::Duration timeout =
          timeout_ms <= 0 ? distkit::dist::GetDefaultGroup() != nullptr
                                ? distkit::dist::GetDefaultGroup()->timeout()
                                : absl::Minutes(30)
                          : absl::Milliseconds(timeout_ms);
      DK_ASSIGN_OR_RETURN(grown,
                          distkit::dist::GrowDefaultGroup(world_size, timeout));
    } else {
      DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
      const absl::Duration timeout =
          timeout_ms <= 0 ? g->timeout() : absl::Milliseconds(timeout_ms);
      DK_ASSIGN_OR_RETURN(
          grown,
          distkit::GrowGroup(
              *g, world_size > 0 ? world_size : distkit::dist::JobWorldSize(),
              timeout));
    }
    return new dk_group(std::move(grown));
  });
}

dk_status_t dk_group_async_error(const dk_group_t* group, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g,
                        GroupOf(const_cast<dk_group_t*>(group)));
    return g->AsyncError();
  });
}

}  // extern "C"

// The C ABI, section "Work": the handle of a non-blocking operation.

extern "C" {

dk_status_t dk_work_test(const dk_work_t* work, dk_work_state_t* state_out,
                         dk_error_t** err) {
  return OnHandle(work, "work", err, [&](const dk_work& w) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(state_out, "state_out"));
    *state_out = static_cast<dk_work_state_t>(w.rep->state());
    return absl::OkStatus();
  });
}

dk_status_t dk_work_wait(dk_work_t* work, int64_t timeout_ms,
                         dk_error_t** err) {
  return OnHandle(work, "work", err, [&](dk_work& w) {
    return w.rep->Wait(timeout_ms < 0 ? absl::InfiniteDuration()
                                      : absl::Milliseconds(timeout_ms));
  });
}

void dk_work_destroy(dk_work_t* work) { delete work; }

dk_status_t dk_work_on_complete(dk_work_t* work, dk_work_callback_t callback,
                                void* arg, dk_error_t** err) {
  return OnHandle(work, "work", err, [&](dk_work& w) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(reinterpret_cast<void*>(callback), "callback"));
    w.rep->OnComplete([callback, arg](const absl::Status& status) {
      callback(arg, static_cast<dk_status_t>(status.code()));
    });
    return absl::OkStatus();
  });
}

}  // extern "C"

// The C ABI, section "Local group": the group of this node's ranks.

extern "C" {

dk_status_t dk_init_local_group(int32_t node_rank, int32_t num_per_node,
                                dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    return distkit::dist::InitLocalGroup(node_rank, num_per_node);
  });
}

dk_status_t dk_init_local_group_from_launcher(dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    return distkit::dist::InitLocalGroupFromLauncher();
  });
}

dk_status_t dk_local_group(dk_group_t** out, dk_error_t** err) {
  return NewHandle(out, err, []() -> absl::StatusOr<dk_group*> {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> local,
                        distkit::dist::GetLocalGroup());
    if (local == nullptr) return nullptr;
    return new dk_group(std::move(local));
  });
}

}  // extern "C"

// The C ABI, section "Parallel state": modelopt's data-, tensor- and
// expert-parallel groups.

// Destroying releases the state but keeps the handle reserved, like a
// group's (convention 11), and every call may come from any thread
// (convention 13), so the state is read and released atomically: a rank,
// size or describe beside a dk_parallel_state_destroy on another thread
// answers from the whole state or as destroyed, never from one half
// released.
struct dk_parallel_state {
 public:
  explicit dk_parallel_state(distkit::dist::ParallelState rep)
      : rep_(std::make_shared<const distkit::dist::ParallelState>(
            std::move(rep))) {}
  // The state, held for the caller; null once destroyed.
  std::shared_ptr<const distkit::dist::ParallelState> Get() const {
    return std::atomic_load(&rep_);
  }
  // Releases the state (the last holder frees it); idempotent.
  void Destroy() {
    std::atomic_exchange(&rep_,
                         std::shared_ptr<const distkit::dist::ParallelState>());
  }

 private:
  std::shared_ptr<const distkit::dist::ParallelState> rep_;
};

namespace distkit {
namespace capi {
namespace {

// The group argument `what` names. A destroyed handle is refused: its null
// rep would otherwise read as the world (convention 11).
absl::StatusOr<dist::DistributedProcessGroup> DpgOf(dk_group_t* group,
                                                    const char* what) {
  if (group == DK_GROUP_UNUSED) return dist::DistributedProcessGroup::Unused();
  if (group == nullptr) return dist::DistributedProcessGroup();
  std::shared_ptr<ProcessGroup> g = group->Get();
  if (g == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the handle was destroyed (dk_group_destroy)"));
  }
  return dist::DistributedProcessGroup(std::move(g));
}

// The group `which` names in `state`, held with the state for the caller;
// null for none or a destroyed state.
std::shared_ptr<const dist::DistributedProcessGroup> Which(
    const dk_parallel_state_t* state, int32_t which) {
  if (state == nullptr) return nullptr;
  std::shared_ptr<const dist::ParallelState> s = state->Get();
  if (s == nullptr) return nullptr;
  const dist::DistributedProcessGroup* g = nullptr;
  switch (which) {
    case DK_PARALLEL_DATA:
      g = &s->data_parallel_group;
      break;
    case DK_PARALLEL_TENSOR:
      g = &s->tensor_parallel_group;
      break;
    case DK_PARALLEL_EXPERT:
      g = &s->expert_model_parallel_group;
      break;
    default:
      return nullptr;
  }
  return std::shared_ptr<const dist::DistributedProcessGroup>(std::move(s), g);
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::capi::DpgOf;
using ::distkit::capi::Which;

extern "C" {

dk_status_t dk_parallel_state_create(dk_group_t* data_parallel,
                                     dk_group_t* tensor_parallel,
                                     dk_group_t* expert_parallel,
                                     dk_parallel_state_t** out,
                                     dk_error_t** err) {
  return NewHandle(out, err, [&]() -> absl::StatusOr<dk_parallel_state*> {
    DK_ASSIGN_OR_RETURN(distkit::dist::DistributedProcessGroup data,
                        DpgOf(data_parallel, "data_parallel"));
    DK_ASSIGN_OR_RETURN(distkit::dist::DistributedProcessGroup tensor,
                        DpgOf(tensor_parallel, "tensor_parallel"));
    DK_ASSIGN_OR_RETURN(distkit::dist::DistributedProcessGroup expert,
                        DpgOf(expert_parallel, "expert_parallel"));
    return new dk_parallel_state(distkit::dist::ParallelState(
        std::move(data), std::move(tensor), std::move(expert)));
  });
}

void dk_parallel_state_destroy(dk_parallel_state_t* state) {
  // Releases the groups but keeps the small handle: later calls through it
  // answer -1 / DK_FAILED_PRECONDITION instead of reading freed memory.
  if (state != nullptr) state->Destroy();
}

int32_t dk_parallel_state_rank(const dk_parallel_state_t* state,
                               int32_t which) {
  return NoThrow(-1, [&] {
    const auto g = Which(state, which);
    return g == nullptr ? -1 : g->Rank();
  });
}

int32_t dk_parallel_state_size(const dk_parallel_state_t* state,
                               int32_t which) {
  return NoThrow(-1, [&] {
    const auto g = Which(state, which);
    return g == nullptr ? -1 : g->WorldSize();
  });
}

dk_status_t dk_parallel_state_describe(const dk_parallel_state_t* state,
                                       char** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(state, "state"));
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    std::shared_ptr<const distkit::dist::ParallelState> s = state->Get();
    if (s == nullptr) {
      return absl::FailedPreconditionError(
          "parallel_state: the handle was destroyed "
          "(dk_parallel_state_destroy)");
    }
    const std::string text = s->ToString();
    DK_ASSIGN_OR_RETURN(*out, OwnedCopy(text));
    return absl::OkStatus();
  });
}

}  // extern "C"

// The C ABI, section "Devices": this rank's device and copies between
// devices.

extern "C" {

void dk_get_device(DLDevice* out) {
  if (out == nullptr) return;
  *out = NoThrow(DLDevice{kDLCPU, 0},
                 [] { return distkit::ToDLPack(distkit::dist::GetDevice()); });
}

dk_status_t dk_group_comm_device(const dk_group_t* group, DLDevice* out,
                                 dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g,
                        GroupOrNone(const_cast<dk_group_t*>(group)));
    *out = distkit::ToDLPack(g != nullptr ? g->comm_device()
                                          : distkit::Device::Cpu());
    return absl::OkStatus();
  });
}

dk_status_t dk_group_set_cuda_stream(dk_group_t* group, void* stream,
                                     dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOrNone(group));
    return g != nullptr ? g->SetCudaStream(stream) : absl::OkStatus();
  });
}

dk_status_t dk_tensor_copy(const DLTensor* src, DLTensor* dst,
                           dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(TensorRef s, TensorArg(src, "src"));
    DK_ASSIGN_OR_RETURN(TensorRef d, TensorArg(dst, "dst"));
    if (s.dtype() != d.dtype() || s.numel() != d.numel()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor_copy: src is ", distkit::DataTypeName(s.dtype()),
                       " x", s.numel(), " but dst is ",
                       distkit::DataTypeName(d.dtype()), " x", d.numel()));
    }
    return distkit::CopyBytes(d.data(), d.device(), s.data(), s.device(),
                              s.nbytes());
  });
}

}  // extern "C"
