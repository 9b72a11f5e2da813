// Host-only build (no CUDA found): every CUDA device is refused.
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cc/core/device_copy.h"

namespace distkit {
namespace {
absl::Status NoCuda(Device d) {
  return absl::FailedPreconditionError(
      absl::StrCat("this distkit was built without CUDA; ", d.ToString(),
                   " is not available (install CUDA and rebuild)"));
}
}  // namespace

int CudaDeviceCount() { return 0; }

absl::Status CudaUsable() {
  return absl::FailedPreconditionError(
      "this distkit was built without CUDA (install CUDA and rebuild)");
}

absl::Status CopyBytes(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t n) {
  if (!dst_device.is_cpu()) return NoCuda(dst_device);
  if (!src_device.is_cpu()) return NoCuda(src_device);
  if (n > 0) std::memmove(dst, src, n);
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(Device device,
                                                    size_t bytes) {
  if (!device.is_cpu()) return NoCuda(device);
  DeviceBuffer b;
  b.device_ = device;
  b.data_ = std::malloc(bytes > 0 ? bytes : 1);
  if (b.data_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes"));
  }
  return b;
}

void DeviceBuffer::Release() {
  std::free(data_);
  data_ = nullptr;
}

#include "cc/core/device_buffer_common.inc"

}  // namespace distkit
