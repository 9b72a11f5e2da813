#include "capi/arguments.h"

#include "absl/strings/str_cat.h"
#include "cc/core/status.h"

namespace distkit {
namespace capi {

absl::Status NotNull(const void* p, const char* what) {
  if (p == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  return absl::OkStatus();
}

absl::Status CheckCount(size_t n, size_t element_size, const char* what) {
  if (n > static_cast<size_t>(TensorRef::kMaxBytes) / element_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", n, " is larger than any array can be (",
                     TensorRef::kMaxBytes, " bytes)"));
  }
  return absl::OkStatus();
}

absl::Status CheckBufferBytes(size_t bytes, absl::string_view what) {
  if (bytes > static_cast<size_t>(TensorRef::kMaxBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " of ", bytes, " bytes is larger than any buffer can be (2^47)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorRef> TensorArg(const DLTensor* t, const char* what) {
  return TensorRef::FromDLPack(t, what);
}

absl::StatusOr<std::vector<TensorRef>> TensorArgs(DLTensor* const* tensors,
                                                  size_t n, const char* what,
                                                  bool nullable) {
  DK_RETURN_IF_ERROR(CheckCount(n, sizeof(DLTensor*), what));
  if (n > 0 && tensors == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  std::vector<TensorRef> out;
  for (size_t i = 0; i < n; ++i) {
    if (tensors[i] == nullptr && nullable) {
      out.emplace_back();
      continue;
    }
    DK_ASSIGN_OR_RETURN(
        TensorRef t,
        TensorArg(tensors[i], absl::StrCat(what, "[", i, "]").c_str()));
    out.push_back(t);
  }
  return out;
}

absl::StatusOr<ReduceOp> ReduceOpArg(dk_reduce_op_t op) {
  absl::StatusOr<ReduceOp> r = ReduceOpFromInt(op);
  if (!r.ok()) return Annotate(r.status(), "op");
  return r;
}

}  // namespace capi
}  // namespace distkit
