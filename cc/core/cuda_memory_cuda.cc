// CUDA build: through the CUDA runtime, opened at first use.
#include "absl/strings/str_cat.h"
#include "cc/core/cuda_library.h"
#include "cc/core/cuda_memory.h"
#include "cc/core/status.h"

namespace distkit {
namespace cuda_memory {
namespace {

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

// Only called once DeviceCount() succeeded, so the library loaded.
const CudaLibrary& Cuda() { return **LoadCudaLibrary(); }

}  // namespace

const absl::StatusOr<int>& DeviceCount() {
  // Once: the answer does not change within a process.
  static const absl::StatusOr<int>* const count =
      new absl::StatusOr<int>(Probe());
  return *count;
}

absl::Status Copy(void* dst, Device dst_device, const void* src,
                  Device src_device, size_t n) {
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  // On the device that holds the data (the destination's for host -> device).
  CudaDeviceGuard on(Cuda(),
                     src_device.is_cpu() ? dst_device.index : src_device.index);
  DK_RETURN_IF_ERROR(on.status());
  const CudaLibrary& cuda = Cuda();
  DK_RETURN_IF_ERROR(
      CudaStatus(cuda, cuda.Memcpy(dst, src, n, kind), "cudaMemcpy"));
  // cudaMemcpy into device memory may return before the device has the
  // bytes (from pageable memory it returns once they are staged; device to
  // device it does not wait at all), and work on a non-blocking stream is
  // not ordered after it. Copies here are blocking: they are done.
  if (dst_device.is_cpu()) return absl::OkStatus();
  return CudaStatus(cuda, cuda.StreamSynchronize(cudaStreamLegacy),
                    "cudaStreamSynchronize");
}

absl::Status CopyOnStream(void* dst, Device dst_device, const void* src,
                          Device src_device, size_t n, const CopyStream& on) {
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  // On the stream's device: the legacy handle means the current device's.
  CudaDeviceGuard guard(Cuda(), on.device.index);
  DK_RETURN_IF_ERROR(guard.status());
  const CudaLibrary& cuda = Cuda();
  const cudaStream_t stream = on.stream != nullptr
                                  ? static_cast<cudaStream_t>(on.stream)
                                  : cudaStreamLegacy;
  DK_RETURN_IF_ERROR(CudaStatus(cuda,
                                cuda.MemcpyAsync(dst, src, n, kind, stream),
                                "cudaMemcpyAsync on the caller's stream"));
  // Device to device the stream orders it for everything that follows the
  // stream (the next collective waits on it): nothing for the host to wait
  // for. Host memory is read or reused by the caller on return.
  if (kind == cudaMemcpyDeviceToDevice) return absl::OkStatus();
  return CudaStatus(cuda, cuda.StreamSynchronize(stream),
                    "cudaStreamSynchronize of the caller's stream");
}

absl::Status Zero(void* dst, Device device, size_t n) {
  CudaDeviceGuard on(Cuda(), device.index);
  DK_RETURN_IF_ERROR(on.status());
  const CudaLibrary& cuda = Cuda();
  DK_RETURN_IF_ERROR(CudaStatus(
      cuda, cuda.MemsetAsync(dst, 0, n, cudaStreamLegacy), "cudaMemsetAsync"));
  // Blocking, as Copy: work on a non-blocking stream is not ordered after
  // the legacy stream's.
  return CudaStatus(cuda, cuda.StreamSynchronize(cudaStreamLegacy),
                    "cudaStreamSynchronize");
}

absl::Status ZeroOnStream(void* dst, Device device, size_t n,
                          const CopyStream& on) {
  CudaDeviceGuard guard(Cuda(), device.index);
  DK_RETURN_IF_ERROR(guard.status());
  const CudaLibrary& cuda = Cuda();
  // The stream orders it for everything that follows it: nothing to wait
  // for on the host.
  return CudaStatus(cuda,
                    cuda.MemsetAsync(dst, 0, n,
                                     on.stream != nullptr
                                         ? static_cast<cudaStream_t>(on.stream)
                                         : cudaStreamLegacy),
                    "cudaMemsetAsync on the caller's stream");
}

absl::Status SynchronizeStream(Device device, void* stream) {
  CudaDeviceGuard guard(Cuda(), device.index);
  DK_RETURN_IF_ERROR(guard.status());
  const CudaLibrary& cuda = Cuda();
  return CudaStatus(cuda,
                    cuda.StreamSynchronize(
                        stream != nullptr ? static_cast<cudaStream_t>(stream)
                                          : cudaStreamLegacy),
                    "cudaStreamSynchronize of the caller's stream");
}

absl::StatusOr<void*> Allocate(Device device, size_t bytes) {
  CudaDeviceGuard on(Cuda(), device.index);
  DK_RETURN_IF_ERROR(on.status());
  const CudaLibrary& cuda = Cuda();
  void* p = nullptr;
  const cudaError_t e = cuda.Malloc(&p, bytes > 0 ? bytes : 1);
  if (e != cudaSuccess) return CudaStatus(cuda, e, "cudaMalloc");
  return p;
}

void Free(Device device, void* p) {
  CudaDeviceGuard on(Cuda(), device.index);
  Cuda().Free(p);
}

}  // namespace cuda_memory
}  // namespace distkit
