// all_reduce and reduce through the slots of the step protocol (ShmSteps):
// a small buffer in one step, where every rank folds every slot; a larger
// one by slices, pipelined in slot-sized chunks, where each rank folds
// 1/size of each chunk (all in parallel) and the reduced slices are then
// copied out. Folds run in rank order, as on every other path, so float
// sums round identically everywhere.

#ifndef DISTKIT_CC_COMM_SHM_SLOT_REDUCE_H_
#define DISTKIT_CC_COMM_SHM_SLOT_REDUCE_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "cc/comm/op_context.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/comm/shm/shm_segment.h"
#include "cc/comm/shm/shm_steps.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// out = slot 0 op slot 1 op ... over `bytes` at `offset` of the slots of
// `turn` holding `slot_bytes`; out must not be a slot. Inline: the one-step
// paths (and an operation carried by the signature exchange) are a few
// hundred nanoseconds, and this is most of them.
inline void FoldSlots(const ShmLayout& layout, ReduceFn fn, size_t offset,
                      size_t bytes, size_t slot_bytes, size_t elem, char* out,
                      int turn) {
  const size_t n = bytes / elem;
  fn(out, layout.slot(0, slot_bytes, turn) + offset,
     layout.slot(1, slot_bytes, turn) + offset, n);
  for (int r = 2; r < layout.size(); ++r) {
    fn(out, out, layout.slot(r, slot_bytes, turn) + offset, n);
  }
}

// all_reduce (root < 0) or reduce to `root` of a buffer that fits a slot in
// one step: every rank (only the root, for reduce) folds every slot.
absl::Status ReduceInOneStep(ShmSteps& steps, const OpContext& ctx,
                             TensorRef data, ReduceFn fn, int root);

// all_reduce (root < 0) or reduce to `root`, by slices. `scratch` holds a
// non-root's folded slice (reduce).
absl::Status ReduceBySlices(ShmSteps& steps, const OpContext& ctx,
                            TensorRef data, ReduceFn fn, int root,
                            std::vector<char>* scratch);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SLOT_REDUCE_H_
