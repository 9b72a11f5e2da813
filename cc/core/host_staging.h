// Host arithmetic on memory of any device, the other half of the casting
// rule (device_staging.h stages host data onto a comm device for a
// collective): casting, adding and zeroing run on the CPU, so memory that
// lives elsewhere (CUDA parameters under a CPU backend, a test's extension
// device) is copied into a host buffer, worked on there, and copied back.
// Host memory is worked on in place.

#ifndef DISTKIT_CC_CORE_HOST_STAGING_H_
#define DISTKIT_CC_CORE_HOST_STAGING_H_

#include "absl/status/statusor.h"
#include "cc/core/device_copy.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// Host memory holding a tensor's bytes: the tensor itself when it is on the
// host, else a staging buffer.
class HostCopy {
 public:
  // `read`: fill the staging buffer from `t` (false when it is only
  // written).
  static absl::StatusOr<HostCopy> Of(TensorRef t, bool read);

  TensorRef host() const { return host_; }
  // Copies the host bytes back into the tensor when it is not on the host.
  absl::Status WriteBack();

 private:
  TensorRef tensor_, host_;
  DeviceBuffer staging_;
};

// dst = src converted (floating dtypes; same numel; any devices).
absl::Status CastInto(TensorRef dst, TensorRef src);
// dst += src converted.
absl::Status AddInto(TensorRef dst, TensorRef src);
// Every byte of `t` zero.
absl::Status ZeroFill(TensorRef t);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_HOST_STAGING_H_
