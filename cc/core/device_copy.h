// Moving bytes between the host and other devices, for mmengine's casting
// rule (data not on the communication device is copied there, reduced, and
// copied back), the device-generic reducer and the ABI's dk_tensor_copy.
// CUDA memory goes through the CUDA runtime, opened at first use where
// CUDA's headers were found at build time (cuda_memory.h); without CUDA any
// CUDA device is FAILED_PRECONDITION saying why. An extension device
// (Device::Ext) is reached through hooks a test installs.

#ifndef DISTKIT_CC_CORE_DEVICE_COPY_H_
#define DISTKIT_CC_CORE_DEVICE_COPY_H_

#include <cstddef>
#include <functional>

#include "absl/status/statusor.h"
#include "cc/core/device.h"

namespace distkit {

// Usable CUDA devices: 0 without CUDA support, a driver or a GPU.
int CudaDeviceCount();

// OK when at least one CUDA device is usable; else FAILED_PRECONDITION saying
// why not (no libcudart, no driver, no device), for messages that must tell
// the user what to fix.
absl::Status CudaUsable();

// mmengine's get_device for rank-local work: cuda:<local_rank % count> when a
// GPU is usable, else cpu.
Device DefaultDevice(int local_rank);

// Copies n bytes from src (on src_device) to dst (on dst_device); blocking.
absl::Status CopyBytes(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t n);

// Writes n zero bytes at dst on `device`; like CopyBytes, blocking, or on
// the caller's stream inside a CopyStreamScope (not waited for). CUDA memory
// is zeroed by the device (cudaMemsetAsync), never copied from the host.
absl::Status ZeroBytes(void* dst, Device device, size_t n);

// Memory owned on one device. CUDA memory comes from a per-device cache of
// blocks (cuda_block_cache.h): after warm-up, allocating and freeing call
// neither cudaMalloc nor cudaFree.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Allocate(Device device, size_t bytes);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  Device device() const { return device_; }

 private:
  void Release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

// Frees the CUDA memory DeviceBuffer keeps for reuse on `device` (every
// device for the CPU), as torch.cuda.empty_cache() does for torch's; returns
// the bytes given back.
size_t ReleaseCachedCudaMemory(Device device = Device::Cpu());

// What an extension device's memory is, as functions: allocation and the
// three copy directions (n bytes each). A test installs one whose memory
// cannot be read as host memory (it keeps the bytes transformed), so that a
// path that forgets a copy computes wrong values instead of passing.
struct ExtensionDeviceHooks {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* p)> free;
  std::function<void(void* dst, const void* host_src, size_t n)> to_device;
  std::function<void(void* host_dst, const void* src, size_t n)> to_host;
  std::function<void(void* dst, const void* src, size_t n)> on_device;
};

// Installs (or, with empty hooks, removes) the extension device for this
// process. Not thread-safe against copies in flight: install before use.
void InstallExtensionDevice(ExtensionDeviceHooks hooks);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_DEVICE_COPY_H_
