#include "cc/group/recovery_backends.h"

#include "absl/strings/str_cat.h"

namespace distkit {

absl::Status CheckRecoverableBackend(absl::string_view backend,
                                     absl::string_view what) {
  if (backend == "gloo" || backend == "nccl" ||
      backend == "cpu:gloo,cuda:nccl") {
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(what, " runs on ", backend,
                   "; only groups on gloo, nccl or cpu:gloo,cuda:nccl can be "
                   "shrunk or grown"));
}

}  // namespace distkit
