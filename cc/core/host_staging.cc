#include "cc/core/host_staging.h"

#include <cstring>

#include "cc/core/float_cast.h"
#include "cc/core/status.h"

namespace distkit {

absl::StatusOr<HostCopy> HostCopy::Of(TensorRef t, bool read) {
  HostCopy h;
  h.tensor_ = t;
  if (t.device().is_cpu()) {
    h.host_ = t;
    return h;
  }
  DK_ASSIGN_OR_RETURN(h.staging_,
                      DeviceBuffer::Allocate(Device::Cpu(), t.nbytes()));
  h.host_ = t.At(h.staging_.data(), Device::Cpu());
  if (read) {
    DK_RETURN_IF_ERROR(CopyBytes(h.host_.data(), Device::Cpu(), t.data(),
                                 t.device(), t.nbytes()));
  }
  return h;
}

absl::Status HostCopy::WriteBack() {
  if (tensor_.device().is_cpu()) return absl::OkStatus();
  return CopyBytes(tensor_.data(), tensor_.device(), host_.data(),
                   Device::Cpu(), host_.nbytes());
}

absl::Status CastInto(TensorRef dst, TensorRef src) {
  if (dst.dtype() == src.dtype()) {
    return CopyBytes(dst.data(), dst.device(), src.data(), src.device(),
                     src.nbytes());
  }
  DK_ASSIGN_OR_RETURN(HostCopy s, HostCopy::Of(src, /*read=*/true));
  DK_ASSIGN_OR_RETURN(HostCopy d, HostCopy::Of(dst, /*read=*/false));
  DK_RETURN_IF_ERROR(CastFloats(s.host().data(), src.dtype(), d.host().data(),
                                dst.dtype(), src.numel()));
  return d.WriteBack();
}

absl::Status AddInto(TensorRef dst, TensorRef src) {
  DK_ASSIGN_OR_RETURN(HostCopy s, HostCopy::Of(src, /*read=*/true));
  DK_ASSIGN_OR_RETURN(HostCopy d, HostCopy::Of(dst, /*read=*/true));
  DK_RETURN_IF_ERROR(AddFloats(s.host().data(), src.dtype(), d.host().data(),
                               dst.dtype(), src.numel()));
  return d.WriteBack();
}

absl::Status ZeroFill(TensorRef t) {
  return ZeroBytes(t.data(), t.device(), t.nbytes());
}

}  // namespace distkit
