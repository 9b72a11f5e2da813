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
  decltype(&::cudaStreamCreateWithFlags) StreamCreateWithFlags;
  decltype(&::cudaStreamDestroy) StreamDestroy;
  decltype(&::cudaStreamSynchronize) StreamSynchronize;
  decltype(&::cudaStreamWaitEvent) StreamWaitEvent;
  decltype(&::cudaEventCreateWithFlags) EventCreateWithFlags;
  decltype(&::cudaEventDestroy) EventDestroy;
  decltype(&::cudaEventRecord) EventRecord;
  decltype(&::cudaEventQuery) EventQuery;
  decltype(&::cudaPointerGetAttributes) PointerGetAttributes;
  // What a device and the installed software are, for reports
  // (tools/gpu_check).
  decltype(&::cudaGetDeviceProperties) GetDeviceProperties;
  decltype(&::cudaDriverGetVersion) DriverGetVersion;
  decltype(&::cudaRuntimeGetVersion) RuntimeGetVersion;
};

// The process's CUDA runtime, loaded once (thread-safe); the same error on
// every call when it cannot be loaded.
absl::StatusOr<const CudaLibrary*> LoadCudaLibrary();

// "<what>: cudaErrorX (text)" as an INTERNAL status; OK for cudaSuccess.
absl::Status CudaStatus(const CudaLibrary& cuda, cudaError_t e,
                        const char* what);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_CUDA_LIBRARY_H_
