// modelopt's DistributedProcessGroup and ParallelState. A
// DistributedProcessGroup wraps a group, the world (nullptr) or "unused"
// (-1); an unused or not-initialized one reports rank and size -1.
// ParallelState holds the data-, tensor- and expert-parallel groups; the
// defaults are data = the world, tensor and expert unused.

#ifndef DISTKIT_CC_DIST_API_PARALLEL_STATE_H_
#define DISTKIT_CC_DIST_API_PARALLEL_STATE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace dist {

class DistributedProcessGroup {
 public:
  // The world.
  DistributedProcessGroup() = default;
  explicit DistributedProcessGroup(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)) {}
  static DistributedProcessGroup Unused();

  bool is_unused() const { return unused_; }
  // Distributed is initialized and this group is not -1.
  bool IsInitialized() const;
  int Rank() const;       // -1 when not initialized
  int WorldSize() const;  // -1 when not initialized
  // "group: <name|None|-1>, initialized: <true|false>, world size: <n>"
  std::string ToString() const;
  // The group to use (the world when constructed without one; null when
  // the world is not initialized). Held for the caller: a shutdown on
  // another thread may drop the world while the caller uses it.
  std::shared_ptr<ProcessGroup> group() const;

  // For each group in order, skipping uninitialized ones: all-gather `obj`
  // across the group and replace it with op(list). E.g. op = max across DP,
  // then across TP.
  static absl::StatusOr<std::string> GetDistSyncdObj(
      std::string obj, const std::vector<DistributedProcessGroup>& groups,
      const std::function<std::string(const std::vector<std::string>&)>& op);

 private:
  std::shared_ptr<ProcessGroup> group_;
  bool unused_ = false;
};

class ParallelState {
 public:
  ParallelState(
      DistributedProcessGroup data_parallel = DistributedProcessGroup(),
      DistributedProcessGroup tensor_parallel =
          DistributedProcessGroup::Unused(),
      DistributedProcessGroup expert_model_parallel =
          DistributedProcessGroup::Unused())
      : data_parallel_group(std::move(data_parallel)),
        tensor_parallel_group(std::move(tensor_parallel)),
        expert_model_parallel_group(std::move(expert_model_parallel)) {}

  // "data_parallel_group: <dpg>, tensor_parallel_group: <dpg>,
  //  expert_model_parallel_group: <dpg>"
  std::string ToString() const;

  DistributedProcessGroup data_parallel_group;
  DistributedProcessGroup tensor_parallel_group;
  DistributedProcessGroup expert_model_parallel_group;
};

}  // namespace dist
}  // namespace distkit

#endif  // DISTKIT_CC_DIST_API_PARALLEL_STATE_H_
