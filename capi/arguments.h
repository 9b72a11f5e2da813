// Checks on the arguments a C caller passes, each error naming the argument,
// and their conversion to the core's types.

#ifndef DISTKIT_CAPI_ARGUMENTS_H_
#define DISTKIT_CAPI_ARGUMENTS_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cc/core/reduce_op.h"
#include "cc/core/tensor_ref.h"
#include "distkit/distkit.h"

namespace distkit {
namespace capi {

// "<what> is NULL" when `p` is.
absl::Status NotNull(const void* p, const char* what);

// A length argument the caller's array cannot have: more elements of
// `element_size` bytes than the largest buffer holds. Checked before
// anything is read or allocated from it (a wrong length must be an error,
// not a read past the array or a crash in an allocator).
absl::Status CheckCount(size_t n, size_t element_size, const char* what);

// The tensor `t` viewed, or why it cannot be ("<what>: ...").
absl::StatusOr<TensorRef> TensorArg(const DLTensor* t, const char* what);

// Tensors from an array of `n` DLTensor*, named "<what>[i]"; NULL entries
// allowed when `nullable` (they become empty TensorRefs).
absl::StatusOr<std::vector<TensorRef>> TensorArgs(DLTensor* const* tensors,
                                                  size_t n, const char* what,
                                                  bool nullable);

// The reduction `op` names ("op: ..." when none).
absl::StatusOr<ReduceOp> ReduceOpArg(dk_reduce_op_t op);

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_ARGUMENTS_H_
