#include "cc/core/device_copy.h"

#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/core/copy_stream.h"
#include "cc/core/cuda_block_cache.h"
#include "cc/core/cuda_memory.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

ExtensionDeviceHooks& Extension() {
  static ExtensionDeviceHooks* hooks = new ExtensionDeviceHooks;
  return *hooks;
}

absl::Status Usable(Device d) {
  if (d.is_cpu()) return absl::OkStatus();
  if (d.is_ext()) {
    if (Extension().allocate) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(d.ToString(), " is not available (no extension device)"));
  }
  const absl::StatusOr<int>& count = cuda_memory::DeviceCount();
  if (!count.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        d.ToString(), " is not available: ", count.status().message()));
  }
  if (d.index < 0 || d.index >= *count) {
    return absl::FailedPreconditionError(
        absl::StrCat(d.ToString(), " is not available (", *count,
                     " usable CUDA device(s))"));
  }
  return absl::OkStatus();
}

// Host <-> extension device (one side may be the host).
absl::Status ExtensionCopy(void* dst, Device dst_device, const void* src,
                           Device src_device, size_t n) {
  const ExtensionDeviceHooks& ext = Extension();
  if (dst_device.is_ext() && src_device.is_ext()) {
    ext.on_device(dst, src, n);
  } else if (dst_device.is_ext() && src_device.is_cpu()) {
    ext.to_device(dst, src, n);
  } else if (src_device.is_ext() && dst_device.is_cpu()) {
    ext.to_host(dst, src, n);
  } else {
    // An extension device's hooks reach the host and itself only.
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot copy from ", src_device.ToString(), " to ",
        dst_device.ToString(),
        ": an extension device copies to and from the host and itself; "
        "stage through the host"));
  }
  return absl::OkStatus();
}

}  // namespace

int CudaDeviceCount() {
  const absl::StatusOr<int>& count = cuda_memory::DeviceCount();
  return count.ok() ? *count : 0;
}

absl::Status CudaUsable() { return cuda_memory::DeviceCount().status(); }

Device DefaultDevice(int local_rank) {
  const int count = CudaDeviceCount();
  if (count <= 0) return Device::Cpu();
  return Device::Cuda(local_rank % count);
}

absl::Status CopyBytes(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t n) {
  if (n == 0) return absl::OkStatus();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, n);
    return absl::OkStatus();
  }
  DK_RETURN_IF_ERROR(Usable(dst_device));
  DK_RETURN_IF_ERROR(Usable(src_device));
  if (dst_device.is_ext() || src_device.is_ext()) {
    return ExtensionCopy(dst, dst_device, src, src_device, n);
  }
  // On the caller's stream when a scope names it for one of the sides.
  std::optional<CopyStream> on = CopyStreamFor(dst_device);
  if (!on.has_value()) on = CopyStreamFor(src_device);
  if (on.has_value()) {
    return cuda_memory::CopyOnStream(dst, dst_device, src, src_device, n, *on);
  }
  return cuda_memory::Copy(dst, dst_device, src, src_device, n);
}

absl::Status ZeroBytes(void* dst, Device device, size_t n) {
  if (n == 0) return absl::OkStatus();
  if (device.is_cpu()) {
    std::memset(dst, 0, n);
    return absl::OkStatus();
  }
  DK_RETURN_IF_ERROR(Usable(device));
  if (device.is_ext()) {
    // An extension device has copies only.
    const std::vector<char> zeros(n, 0);
    return ExtensionCopy(dst, device, zeros.data(), Device::Cpu(), n);
  }
  if (std::optional<CopyStream> on = CopyStreamFor(device); on.has_value()) {
    return cuda_memory::ZeroOnStream(dst, device, n, *on);
  }
  return cuda_memory::Zero(dst, device, n);
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(Device device,
                                                    size_t bytes) {
  DK_RETURN_IF_ERROR(Usable(device));
  DeviceBuffer b;
  b.device_ = device;
  b.bytes_ = bytes;
  if (device.is_cpu()) {
    b.data_ = std::malloc(bytes > 0 ? bytes : 1);
  } else if (device.is_ext()) {
    b.data_ = Extension().allocate(bytes > 0 ? bytes : 1);
  } else {
    DK_ASSIGN_OR_RETURN(b.data_, cuda_block_cache::Take(device, bytes));
  }
  if (b.data_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", bytes, " bytes on ", device.ToString()));
  }
  return b;
}

void DeviceBuffer::Release() {
  if (data_ == nullptr) return;
  if (device_.is_cpu()) {
    std::free(data_);
  } else if (device_.is_ext()) {
    Extension().free(data_);
  } else {
    // Work queued on the caller's stream may still use the block, which the
    // cache hands out again at once (copy_stream.h).
    if (CopyStreamFor(device_).has_value()) {
      SynchronizeCopyStream().IgnoreError();
    }
    cuda_block_cache::Put(device_, data_, bytes_);
  }
  data_ = nullptr;
}

size_t ReleaseCachedCudaMemory(Device device) {
  return cuda_block_cache::Release(device);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), device_(other.device_) {
  other.data_ = nullptr;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    other.data_ = nullptr;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Release(); }

void InstallExtensionDevice(ExtensionDeviceHooks hooks) {
  Extension() = std::move(hooks);
}

}  // namespace distkit
