// The C ABI, section "Local group": the group of this node's ranks.

#include <memory>

#include "absl/status/status.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "capi/handles.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

using ::distkit::ProcessGroup;
using ::distkit::capi::Guard;
using ::distkit::capi::NotNull;

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
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> local,
                        distkit::dist::GetLocalGroup());
    *out = local == nullptr ? nullptr : new dk_group{std::move(local)};
    return absl::OkStatus();
  });
}

}  // extern "C"
