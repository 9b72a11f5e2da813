#include "capi/handles.h"

#include "cc/dist_api/dist.h"

namespace distkit {
namespace capi {

absl::StatusOr<std::shared_ptr<ProcessGroup>> GroupOf(dk_group_t* group) {
  if (group != nullptr) {
    std::shared_ptr<ProcessGroup> g = group->Get();
    if (g == nullptr) {
      return absl::FailedPreconditionError(
          "group: the handle was destroyed (dk_group_destroy)");
    }
    return g;
  }
  std::shared_ptr<ProcessGroup> world = dist::GetDefaultGroup();
  if (world == nullptr) {
    return absl::FailedPreconditionError(
        "group is NULL and there is no default group: call dk_init first");
  }
  return world;
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> GroupOrNone(dk_group_t* group) {
  if (group == nullptr && !dist::IsDistributed()) return nullptr;
  return GroupOf(group);
}

}  // namespace capi
}  // namespace distkit
