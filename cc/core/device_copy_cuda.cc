// CUDA build: host <-> device copies through the CUDA runtime, opened at
// first use (cuda_library.h). Without libcudart, a driver or a GPU,
// CudaDeviceCount() is 0 and CUDA devices are refused saying why.
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cc/core/cuda_library.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// The device count, or why there is none; computed once (the answer does
// not change within a process, and cudaGetDeviceCount is not free).
absl::StatusOr<int> Probe() {
  DK_ASSIGN_OR_RETURN(const CudaLibrary* cuda, LoadCudaLibrary());
  int count = 0;
  const cudaError_t e = cuda->GetDeviceCount(&count);
  if (e != cudaSuccess) {
    cuda->GetLastError();  // clear the sticky "no device" error
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: cudaGetDeviceCount: ", cuda->GetErrorName(e),
        " (", cuda->GetErrorString(e), ")"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError("no CUDA device on this machine");
  }
  return count;
}

const absl::StatusOr<int>& Probed() {
  static const absl::StatusOr<int>* const probed =
      new absl::StatusOr<int>(Probe());
  return *probed;
}

absl::Status Usable(Device d) {
  if (d.is_cpu()) return absl::OkStatus();
  const absl::StatusOr<int>& count = Probed();
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

// Only called after Usable() accepted a CUDA device, so the library loaded.
const CudaLibrary& Cuda() { return **LoadCudaLibrary(); }

}  // namespace

int CudaDeviceCount() {
  const absl::StatusOr<int>& count = Probed();
  return count.ok() ? *count : 0;
}

absl::Status CudaUsable() { return Probed().status(); }

absl::Status CopyBytes(void* dst, Device dst_device, const void* src,
                       Device src_device, size_t n) {
  if (n == 0) return absl::OkStatus();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memmove(dst, src, n);
    return absl::OkStatus();
  }
  DK_RETURN_IF_ERROR(Usable(dst_device));
  DK_RETURN_IF_ERROR(Usable(src_device));
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  const CudaLibrary& cuda = Cuda();
  return CudaStatus(cuda, cuda.Memcpy(dst, src, n, kind), "cudaMemcpy");
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
  DK_RETURN_IF_ERROR(Usable(device));
  const CudaLibrary& cuda = Cuda();
  int previous = 0;
  cuda.GetDevice(&previous);
  cuda.SetDevice(device.index);
  const cudaError_t e = cuda.Malloc(&b.data_, bytes > 0 ? bytes : 1);
  cuda.SetDevice(previous);
  if (e != cudaSuccess) {
    b.data_ = nullptr;
    return CudaStatus(cuda, e, "cudaMalloc");
  }
  return b;
}

void DeviceBuffer::Release() {
  if (data_ == nullptr) return;
  if (device_.is_cpu()) {
    std::free(data_);
  } else {
    Cuda().Free(data_);
  }
  data_ = nullptr;
}

#include "cc/core/device_buffer_common.inc"

}  // namespace distkit
