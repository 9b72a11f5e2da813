#include "cc/dist_api/parallel_state.h"

#include "absl/strings/str_cat.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/object_collectives.h"

namespace distkit {
namespace dist {

DistributedProcessGroup DistributedProcessGroup::Unused() {
  DistributedProcessGroup g;
  g.unused_ = true;
  return g;
}

bool DistributedProcessGroup::IsInitialized() const {
  return IsDistributed() && !unused_;
}

std::shared_ptr<ProcessGroup> DistributedProcessGroup::group() const {
  if (group_ != nullptr) return group_;
  return GetDefaultGroup();
}

// The group is fetched once and held: asking for the world again after
// IsInitialized() read null when another thread shut the job down between.
int DistributedProcessGroup::Rank() const {
  if (!IsInitialized()) return -1;
  const std::shared_ptr<ProcessGroup> g = group();
  return g == nullptr ? -1 : g->rank();
}

int DistributedProcessGroup::WorldSize() const {
  if (!IsInitialized()) return -1;
  const std::shared_ptr<ProcessGroup> g = group();
  return g == nullptr ? -1 : g->size();
}

std::string DistributedProcessGroup::ToString() const {
  const std::string name =
      unused_ ? "-1" : (group_ != nullptr ? group_->name() : "None");
  return absl::StrCat("group: ", name,
                      ", initialized: ", IsInitialized() ? "True" : "False",
                      ", world size: ", WorldSize());
}

absl::StatusOr<std::string> DistributedProcessGroup::GetDistSyncdObj(
    std::string obj, const std::vector<DistributedProcessGroup>& groups,
    const std::function<std::string(const std::vector<std::string>&)>& op) {
  for (const DistributedProcessGroup& g : groups) {
    if (!g.IsInitialized()) continue;
    const std::shared_ptr<ProcessGroup> group = g.group();
    if (group == nullptr) continue;  // shut down since IsInitialized()
    DK_ASSIGN_OR_RETURN(std::vector<std::string> all,
                        AllGatherObject(obj, group.get()));
    obj = op(all);
  }
  return obj;
}

std::string ParallelState::ToString() const {
  return absl::StrCat(
      "data_parallel_group: ", data_parallel_group.ToString(),
      ", tensor_parallel_group: ", tensor_parallel_group.ToString(),
      ", expert_model_parallel_group: ",
      expert_model_parallel_group.ToString());
}

}  // namespace dist
}  // namespace distkit
