// The CUDA runtime entry points distkit calls, resolved from libcudart with
// dlopen at first use (shared_library.h): libdistkit.so never links it, so
// the same build runs on machines without CUDA. Compiled against CUDA's
// headers for the types; the soname's major version is the headers'.
// DISTKIT_CUDART_LIBRARY names an exact file; else CUDA_HOME, the loader
// path and /usr/local/cuda are searched.

#ifndef DISTKIT_CC_CORE_CUDA_LIBRARY_H_
#define DISTKIT_CC_CORE_CUDA_LIBRARY_H_

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/statusor.h"

namespace distkit {

struct CudaLibrary {
  std::string path;  // where libcudart was found
  decltype(&::cudaGetDeviceCount) GetDeviceCount;
  decltype(&::cudaGetDevice) GetDevice;
  decltype(&::cudaSetDevice) SetDevice;
  decltype(&::cudaGetLastError) GetLastError;
  decltype(&::cudaGetErrorName) GetErrorName;
  decltype(&::cudaGetErrorString) GetErrorString;
  // Spelled out: cuda_runtime.h adds template overloads of cudaMalloc.
  cudaError_t (*Malloc)(void** ptr, size_t size);
  decltype(&::cudaFree) Free;
  // Spelled out: cuda_runtime.h adds template overloads of cudaMallocHost.
  cudaError_t (*MallocHost)(void** ptr, size_t size);
  decltype(&::cudaFreeHost) FreeHost;
  decltype(&::cudaMemcpy) Memcpy;
  decltype(&::cudaMemcpyAsync) MemcpyAsync;
  decltype(&::cudaMemsetAsync) MemsetAsync;
  decltype(&::cudaStreamCreateWithFlags) StreamCreateWithFlags;
  decltype(&::cudaStreamDestroy) StreamDestroy;
  decltype(&::cudaStreamSynchronize) StreamSynchronize;
  decltype(&::cudaStreamWaitEvent) StreamWaitEvent;
  decltype(&::cudaEventCreateWithFlags) EventCreateWithFlags;
  decltype(&::cudaEventDestroy) EventDestroy;
  decltype(&::cudaEventRecord) EventRecord;
  decltype(&::cudaEventQuery) EventQuery;
  decltype(&::cudaPointerGetAttributes) PointerGetAttributes;
  // The driver's cuDevicePrimaryCtxGetState (libcuda.so.1, or the runtime
  // library when it exports it, as the simulator does); CUresult and
  // CUdevice are ints. Null when neither has it.
  int (*DevicePrimaryCtxGetState)(int device, unsigned int* flags,
                                  int* active) = nullptr;
  // What a device and the installed software are, for reports
  // (tools/gpu_check).
  decltype(&::cudaGetDeviceProperties) GetDeviceProperties;
  decltype(&::cudaDriverGetVersion) DriverGetVersion;
  decltype(&::cudaRuntimeGetVersion) RuntimeGetVersion;
};

// The process's CUDA runtime, loaded once (thread-safe); the same error on
// every call when it cannot be loaded.
absl::StatusOr<const CudaLibrary*> LoadCudaLibrary();

// Makes `device` current on the calling thread for a scope, and on leaving
// switches back only where that creates no CUDA context: a thread that has
// not chosen a device is on 0, and switching to 0 would create a context on
// GPU 0 (hundreds of MB) from a rank that owns another, unless the process
// has one there already (asked through DevicePrimaryCtxGetState; without
// it the previous device is restored).
class CudaDeviceGuard {
 public:
  CudaDeviceGuard(const CudaLibrary& cuda, int device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;
  // Whether switching worked.
  const absl::Status& status() const { return status_; }

 private:
  const CudaLibrary& cuda_;
  absl::Status status_;
  int previous_ = -1;  // restored on leaving; -1: nothing to restore
};

// "<what>: cudaErrorX (text)" as an INTERNAL status; OK for cudaSuccess.
absl::Status CudaStatus(const CudaLibrary& cuda, cudaError_t e,
                        const char* what);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_CUDA_LIBRARY_H_
