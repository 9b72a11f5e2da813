// CUDA build: host <-> device copies through the CUDA runtime. Without a
// driver or GPU, CudaDeviceCount() is 0 and CUDA devices are refused.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cc/core/device_copy.h"

namespace distkit {
namespace {

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

absl::Status Usable(Device d) {
  if (d.is_cpu()) return absl::OkStatus();
  const int count = CudaDeviceCount();
  if (d.index < 0 || d.index >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        d.ToString(), " is not available (", count, " usable CUDA device(s))"));
  }
  return absl::OkStatus();
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

absl::Status CopyBytes(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t n) {
  if (n == 0) return absl::OkStatus();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, n);
    return absl::OkStatus();
  }
  if (absl::Status s = Usable(dst_device); !s.ok()) return s;
  if (absl::Status s = Usable(src_device); !s.ok()) return s;
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  const cudaError_t e = cudaMemcpy(dst, src, n, kind);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpy");
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(Device device,
                                                    size_t bytes) {
  DeviceBuffer b;
  b.device_ = device;
  if (device.is_cpu()) {
    b.data_ = std::malloc(bytes > 0 ? bytes : 1);
    if (b.data_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes"));
    }
    return b;
  }
  if (absl::Status s = Usable(device); !s.ok()) return s;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device.index);
  const cudaError_t e = cudaMalloc(&b.data_, bytes > 0 ? bytes : 1);
  cudaSetDevice(previous);
  if (e != cudaSuccess) return CudaError(e, "cudaMalloc");
  return b;
}

void DeviceBuffer::Release() {
  if (data_ == nullptr) return;
  if (device_.is_cpu()) {
    std::free(data_);
  } else {
    cudaFree(data_);
  }
  data_ = nullptr;
}

#include "cc/core/device_buffer_common.inc"

}  // namespace distkit
