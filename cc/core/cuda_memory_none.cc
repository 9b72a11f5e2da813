// Build without CUDA's headers: there is never a CUDA device.
#include "cc/core/cuda_memory.h"

namespace distkit {
namespace cuda_memory {

const absl::StatusOr<int>& DeviceCount() {
  static const absl::StatusOr<int>* const count =
      new absl::StatusOr<int>(absl::FailedPreconditionError(
          "this distkit was built without CUDA (install CUDA and rebuild)"));
  return *count;
}

absl::Status Copy(void*, Device, const void*, Device, size_t) {
  return DeviceCount().status();
}

absl::Status CopyOnStream(void*, Device, const void*, Device, size_t,
                          const CopyStream&) {
  return DeviceCount().status();
}

absl::Status Zero(void*, Device, size_t) { return DeviceCount().status(); }

absl::Status ZeroOnStream(void*, Device, size_t, const CopyStream&) {
  return DeviceCount().status();
}

absl::Status SynchronizeStream(Device, void*) { return DeviceCount().status(); }

absl::StatusOr<void*> Allocate(Device, size_t) {
  return DeviceCount().status();
}

void Free(Device, void*) {}

}  // namespace cuda_memory
}  // namespace distkit
