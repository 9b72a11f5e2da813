// broadcast and all_gather through the slots of the step protocol
// (ShmSteps), pipelined in chunks: one writer per chunk (the broadcast's
// root) or every writer (all_gather), and every rank reads what it needs
// after the chunk's step.

#ifndef DISTKIT_CC_COMM_SHM_SLOT_COPY_H_
#define DISTKIT_CC_COMM_SHM_SLOT_COPY_H_

#include "absl/status/status.h"
#include "cc/comm/op_context.h"
#include "cc/comm/shm/shm_steps.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// With a core per rank (not `oversubscribed`), chunks start at
// kFirstBroadcastChunk and double up to a slot, so the readers start early.
absl::Status BroadcastBySlots(ShmSteps& steps, const OpContext& ctx,
                              TensorRef data, int root, bool oversubscribed);

absl::Status AllGatherBySlots(ShmSteps& steps, const OpContext& ctx,
                              TensorRef input, TensorRef output);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SLOT_COPY_H_
