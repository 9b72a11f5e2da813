// ShrinkGroup: recovery without restarting the job. After a failure poisons
// a group (a rank died or froze), the survivors each call ShrinkGroup on it:
// it aborts the group here, registers this rank as alive in the group's
// store namespace, waits until every member has registered or `settle` has
// passed, and seals the membership with one compare-and-set, so every
// survivor gets the same list (a rank that registers after the seal gets
// FAILED_PRECONDITION naming the members). The members then form a new group
// among themselves (ranks renumbered 0..n-1 in the old order) on the same
// backend, which a training loop uses to go on at the smaller world size.
//
// Gloo (shared memory, TCP), NCCL and cpu:gloo,cuda:nccl groups: the new
// group connects afresh through the store, on NCCL with a new communicator
// on each member's own device (recovery_backends.h). MPI ends the job when
// a rank dies (DK_UNIMPLEMENTED).

#ifndef DISTKIT_CC_GROUP_SHRINK_H_
#define DISTKIT_CC_GROUP_SHRINK_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cc/group/process_group.h"

namespace distkit {

// Every survivor calls it, the same number of times per group.
absl::StatusOr<std::shared_ptr<ProcessGroup>> ShrinkGroup(
    ProcessGroup& group, absl::Duration settle = absl::Seconds(5));

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_SHRINK_H_
