// File: device_copy.h
//
// Moving bytes between the host and CUDA devices, for mmengine's casting rule
// (data not on the communication device is copied there, reduced, and copied
// back) and the ABI's dk_tensor_copy. Built against CUDA's headers when
// third_party found them (device_copy_cuda.cc, which opens libcudart at first
// use: cuda_library.h), else host-only (device_copy_host.cc), where any CUDA
// device is FAILED_PRECONDITION saying so.

#ifndef DISTKIT_CC_CORE_DEVICE_COPY_H_
#define DISTKIT_CC_CORE_DEVICE_COPY_H_

#include <cstddef>

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

// Memory owned on one device.
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
  Device device_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_DEVICE_COPY_H_
