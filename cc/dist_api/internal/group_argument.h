// How the dist API's calls read their `group` argument: nullptr is the
// default group, and a call that has nothing to do (no distributed job and
// no group given, or a group of one that this rank is in) returns before
// touching its data, as mmengine's do.

#ifndef DISTKIT_CC_DIST_API_INTERNAL_GROUP_ARGUMENT_H_
#define DISTKIT_CC_DIST_API_INTERNAL_GROUP_ARGUMENT_H_

#include <memory>

#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace dist {
namespace internal {

// The group a call runs on: `group` (the caller keeps it alive), or the
// default group, held for as long as the result lives (so a dk_shutdown on
// another thread cannot free it under the call); nullptr when there is no
// job.
inline std::shared_ptr<ProcessGroup> Resolve(ProcessGroup* group) {
  if (group != nullptr) {
    return std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup>(),
                                         group);
  }
  return GetDefaultGroup();
}

// Whether a call on `g` (Resolve's) has nothing to do.
inline bool Trivial(const std::shared_ptr<ProcessGroup>& g) {
  // Not distributed: nothing to do, unless a group was given. A group given
  // explicitly still has its members when the process is not distributed
  // (a C handle stays valid after dk_shutdown): its call is the group's.
  if (g == nullptr) return true;
  // A non-member's call is not a no-op: it goes on, and the group refuses it
  // (FAILED_PRECONDITION), as the header says for every collective.
  return g->is_member() && g->size() == 1;
}

}  // namespace internal
}  // namespace dist
}  // namespace distkit

#endif  // DISTKIT_CC_DIST_API_INTERNAL_GROUP_ARGUMENT_H_
