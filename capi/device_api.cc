// The C ABI, section "Devices": this rank's device and copies between
// devices.

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "cc/core/data_type.h"
#include "cc/core/device.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/dist_api/dist.h"
#include "distkit/distkit.h"

using ::distkit::TensorRef;
using ::distkit::capi::Guard;
using ::distkit::capi::TensorArg;

extern "C" {

void dk_get_device(DLDevice* out) {
  if (out == nullptr) return;
  *out = distkit::ToDLPack(distkit::dist::GetDevice());
}

dk_status_t dk_tensor_copy(const DLTensor* src, DLTensor* dst,
                           dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(TensorRef s, TensorArg(src, "src"));
    DK_ASSIGN_OR_RETURN(TensorRef d, TensorArg(dst, "dst"));
    if (s.dtype() != d.dtype() || s.numel() != d.numel()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor_copy: src is ", distkit::DataTypeName(s.dtype()),
                       " x", s.numel(), " but dst is ",
                       distkit::DataTypeName(d.dtype()), " x", d.numel()));
    }
    return distkit::CopyBytes(d.data(), d.device(), s.data(), s.device(),
                              s.nbytes());
  });
}

}  // extern "C"
