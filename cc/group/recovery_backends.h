// Which backends ShrinkGroup and GrowGroup can rebuild a group on: those
// whose new group connects afresh through the store once the old one is
// aborted. Gloo (shared memory, TCP, hierarchical) makes new connections;
// NCCL ("nccl", and the CUDA half of "cpu:gloo,cuda:nccl") makes a new
// communicator, its ncclUniqueId passed through the store. ncclCommShrink
// would derive one from the old communicator, but it needs that
// communicator alive (the group's Abort has called ncclCommAbort on it) and
// NCCL 2.27 or newer, and it cannot admit a replacement; a new communicator
// works on every NCCL and for both shrink and grow. MPI is refused: a lost
// rank ends an MPI job, and its world is MPI_COMM_WORLD.

#ifndef DISTKIT_CC_GROUP_RECOVERY_BACKENDS_H_
#define DISTKIT_CC_GROUP_RECOVERY_BACKENDS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distkit {

// OK when a group on `backend` can be shrunk and grown; else UNIMPLEMENTED,
// saying `what` ("shrink: group 'world'") cannot and which backends can.
absl::Status CheckRecoverableBackend(absl::string_view backend,
                                     absl::string_view what);

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_RECOVERY_BACKENDS_H_
