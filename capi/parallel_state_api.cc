// The C ABI, section "Parallel state": modelopt's data-, tensor- and
// expert-parallel groups.

#include <string>

#include "absl/status/status.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "capi/caller_memory.h"
#include "capi/handles.h"
#include "cc/core/status.h"
#include "cc/dist_api/parallel_state.h"
#include "distkit/distkit.h"

struct dk_parallel_state {
  distkit::dist::ParallelState rep;
  bool destroyed = false;  // the handle stays reserved, like a group's
};

namespace distkit {
namespace capi {
namespace {

dist::DistributedProcessGroup DpgOf(dk_group_t* group) {
  if (group == DK_GROUP_UNUSED) return dist::DistributedProcessGroup::Unused();
  if (group == nullptr) return dist::DistributedProcessGroup();
  return dist::DistributedProcessGroup(group->rep);
}

// The group `which` names in `state`; NULL for none or a destroyed state.
const dist::DistributedProcessGroup* Which(const dk_parallel_state_t* state,
                                           int32_t which) {
  if (state == nullptr || state->destroyed) return nullptr;
  switch (which) {
    case DK_PARALLEL_DATA:
      return &state->rep.data_parallel_group;
    case DK_PARALLEL_TENSOR:
      return &state->rep.tensor_parallel_group;
    case DK_PARALLEL_EXPERT:
      return &state->rep.expert_model_parallel_group;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::capi::DpgOf;
using ::distkit::capi::Guard;
using ::distkit::capi::NotNull;
using ::distkit::capi::OwnedCopy;
using ::distkit::capi::Which;

extern "C" {

dk_status_t dk_parallel_state_create(dk_group_t* data_parallel,
                                     dk_group_t* tensor_parallel,
                                     dk_group_t* expert_parallel,
                                     dk_parallel_state_t** out,
                                     dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    *out = new dk_parallel_state{distkit::dist::ParallelState(
        DpgOf(data_parallel), DpgOf(tensor_parallel), DpgOf(expert_parallel))};
    return absl::OkStatus();
  });
}

void dk_parallel_state_destroy(dk_parallel_state_t* state) {
  if (state == nullptr || state->destroyed) return;
  // Releases the groups but keeps the small handle: later calls through it
  // answer -1 / DK_FAILED_PRECONDITION instead of reading freed memory.
  state->rep = distkit::dist::ParallelState();
  state->destroyed = true;
}

int32_t dk_parallel_state_rank(const dk_parallel_state_t* state,
                               int32_t which) {
  const distkit::dist::DistributedProcessGroup* g = Which(state, which);
  return g == nullptr ? -1 : g->Rank();
}

int32_t dk_parallel_state_size(const dk_parallel_state_t* state,
                               int32_t which) {
  const distkit::dist::DistributedProcessGroup* g = Which(state, which);
  return g == nullptr ? -1 : g->WorldSize();
}

dk_status_t dk_parallel_state_describe(const dk_parallel_state_t* state,
                                       char** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(state, "state"));
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    if (state->destroyed) {
      return absl::FailedPreconditionError(
          "parallel_state: the handle was destroyed "
          "(dk_parallel_state_destroy)");
    }
    const std::string text = state->rep.ToString();
    DK_ASSIGN_OR_RETURN(*out, OwnedCopy(text));
    return absl::OkStatus();
  });
}

}  // extern "C"
