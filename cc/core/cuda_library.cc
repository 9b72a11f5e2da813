#include "cc/core/cuda_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "cc/core/shared_library.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

absl::StatusOr<CudaLibrary> Load() {
  DK_ASSIGN_OR_RETURN(SharedLibrary lib,
                      OpenSharedLibrary(CudaToolkitSearch(
                          "the CUDA runtime",
                          absl::StrCat("libcudart.so.", CUDART_VERSION / 1000),
                          "DISTKIT_CUDART_LIBRARY", {"CUDA_HOME"})));
  CudaLibrary c;
  c.path = lib.path;
#define DK_RESOLVE(field, symbol) \
  DK_RETURN_IF_ERROR(ResolveSymbol(lib, #symbol, &c.field))
  DK_RESOLVE(GetDeviceCount, cudaGetDeviceCount);
  DK_RESOLVE(GetDevice, cudaGetDevice);
  DK_RESOLVE(SetDevice, cudaSetDevice);
  DK_RESOLVE(GetLastError, cudaGetLastError);
  DK_RESOLVE(GetErrorName, cudaGetErrorName);
  DK_RESOLVE(GetErrorString, cudaGetErrorString);
  DK_RESOLVE(Malloc, cudaMalloc);
  DK_RESOLVE(Free, cudaFree);
  DK_RESOLVE(MallocHost, cudaMallocHost);
  DK_RESOLVE(FreeHost, cudaFreeHost);
  DK_RESOLVE(Memcpy, cudaMemcpy);
  DK_RESOLVE(MemcpyAsync, cudaMemcpyAsync);
  DK_RESOLVE(MemsetAsync, cudaMemsetAsync);
  DK_RESOLVE(StreamCreateWithFlags, cudaStreamCreateWithFlags);
  DK_RESOLVE(StreamDestroy, cudaStreamDestroy);
  DK_RESOLVE(StreamSynchronize, cudaStreamSynchronize);
  DK_RESOLVE(StreamWaitEvent, cudaStreamWaitEvent);
  DK_RESOLVE(EventCreateWithFlags, cudaEventCreateWithFlags);
  DK_RESOLVE(EventDestroy, cudaEventDestroy);
  DK_RESOLVE(EventRecord, cudaEventRecord);
  DK_RESOLVE(EventQuery, cudaEventQuery);
  DK_RESOLVE(PointerGetAttributes, cudaPointerGetAttributes);
  DK_RESOLVE(GetDeviceProperties, cudaGetDeviceProperties);
  DK_RESOLVE(DriverGetVersion, cudaDriverGetVersion);
  DK_RESOLVE(RuntimeGetVersion, cudaRuntimeGetVersion);
#undef DK_RESOLVE
  // Optional, from the runtime library (the simulator) or the driver.
  void* state = dlsym(lib.handle, "cuDevicePrimaryCtxGetState");
  if (state == nullptr) {
    if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
      state = dlsym(driver, "cuDevicePrimaryCtxGetState");
    }
  }
  c.DevicePrimaryCtxGetState =
      reinterpret_cast<int (*)(int, unsigned int*, int*)>(state);
  return c;
}

}  // namespace

CudaDeviceGuard::CudaDeviceGuard(const CudaLibrary& cuda, int device)
    : cuda_(cuda) {
  int current = -1;
  if (cuda_.GetDevice(&current) != cudaSuccess || current == device) return;
  status_ = CudaStatus(cuda_, cuda_.SetDevice(device), "cudaSetDevice");
  if (!status_.ok()) return;
  unsigned int flags = 0;
  int active = 1;
  if (cuda_.DevicePrimaryCtxGetState != nullptr &&
      cuda_.DevicePrimaryCtxGetState(current, &flags, &active) != 0) {
    active = 1;  // unknown: restore, as before the question was asked
  }
  if (active) previous_ = current;
}

CudaDeviceGuard::~CudaDeviceGuard() {
  if (previous_ >= 0) cuda_.SetDevice(previous_);
}

absl::StatusOr<const CudaLibrary*> LoadCudaLibrary() {
  return LoadOnce<CudaLibrary, Load>();
}

absl::Status CudaStatus(const CudaLibrary& cuda, cudaError_t e,
                        const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cuda.GetErrorName(e),
                                          " (", cuda.GetErrorString(e), ")"));
}

}  // namespace distkit
