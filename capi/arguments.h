// Checks on the arguments a C caller passes, each error naming the argument,
// and their conversion to the core's types.

#ifndef DISTKIT_CAPI_ARGUMENTS_H_
#define DISTKIT_CAPI_ARGUMENTS_H_

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cc/core/reduce_op.h"
#include "cc/core/status.h"
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

// A caller's buffer of `bytes` the library keeps the address of: no larger
// than any buffer can be ("<what> of N bytes is larger ...").
absl::Status CheckBufferBytes(size_t bytes, absl::string_view what);

// The tensor `t` viewed, or why it cannot be ("<what>: ...").
absl::StatusOr<TensorRef> TensorArg(const DLTensor* t, const char* what);

// Tensors from an array of `n` DLTensor*, named "<what>[i]"; NULL entries
// allowed when `nullable` (they become empty TensorRefs).
absl::StatusOr<std::vector<TensorRef>> TensorArgs(DLTensor* const* tensors,
                                                  size_t n, const char* what,
                                                  bool nullable);

// The reduction `op` names ("op: ..." when none).
absl::StatusOr<ReduceOp> ReduceOpArg(dk_reduce_op_t op);

// The data of the tensor `get(args...)` returns (an absl::StatusOr) in
// *data_out, for the caller to use in place; "data_out is NULL" is checked
// before `get` runs.
template <typename Get, typename... Args>
absl::Status ReturnData(void** data_out, Get&& get, Args&&... args) {
  DK_RETURN_IF_ERROR(NotNull(data_out, "data_out"));
  DK_ASSIGN_OR_RETURN(TensorRef t, std::invoke(std::forward<Get>(get),
                                               std::forward<Args>(args)...));
  *data_out = t.data();
  return absl::OkStatus();
}

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_ARGUMENTS_H_
