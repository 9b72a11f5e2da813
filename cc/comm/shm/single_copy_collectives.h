// The collectives on the single-copy path (single_copy_path.h), each after
// its buffer is published: an all_reduce's rank folds its slice from every
// peer's buffer and writes the result into theirs, a reduce's root folds
// every peer's buffer into its own, an all_gather's rank
// writes its part into every peer's output, a broadcast's root writes the
// first 1/size of its buffer into the readers' while they read the rest, a
// gather's ranks write into the root's output, a scatter's read from its
// input, a reduce_scatter's rank folds its part from every peer's input,
// and an all_to_all's rank reads its part of every peer's input. A last step
// keeps every buffer in place until all are done. A refused read or write fails
// the group (SingleCopyPath::Fail: ShmSteps::FailGroup, or, where the copy
// found the peer's buffer retracted, the mark naming that peer). The caller
// passes every result through SingleCopyPath::Leave, which on an error
// retracts the buffer and waits until no peer copies with it, or, where that
// wait ends first (its bound; after an abort, a copier stopped or without a
// heartbeat), says in the error that the buffer may still be read or
// written (kBufferStillInUsePayload). Buffer conventions: cc/comm/backend.h.

#ifndef DISTKIT_CC_COMM_SHM_SINGLE_COPY_COLLECTIVES_H_
#define DISTKIT_CC_COMM_SHM_SINGLE_COPY_COLLECTIVES_H_

#include "absl/status/status.h"
#include "cc/comm/op_context.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/comm/shm/single_copy_path.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

absl::Status AllReduceBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                   TensorRef data, ReduceFn fn);
absl::Status BroadcastBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                   TensorRef data, int root);
// The root folds every rank's buffer into its own; the others' stay as they
// are.
absl::Status ReduceBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                TensorRef data, ReduceFn fn, int root);
// `input` is outside `output` or exactly this rank's part of it (the
// contract stages any other overlap).
absl::Status AllGatherBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                   TensorRef input, TensorRef output);
absl::Status GatherBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                TensorRef input, TensorRef output, int root);
absl::Status ScatterBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                 TensorRef input, TensorRef output, int root);
// Even parts; `output` is outside `input` (the contract stages an overlap).
absl::Status AllToAllBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                  TensorRef input, TensorRef output);
// `output` is outside `input` (the contract stages an overlap).
absl::Status ReduceScatterBySingleCopy(SingleCopyPath& path,
                                       const OpContext& ctx, TensorRef input,
                                       TensorRef output, ReduceFn fn);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SINGLE_COPY_COLLECTIVES_H_
