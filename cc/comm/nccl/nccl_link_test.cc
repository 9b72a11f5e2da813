// Builds and links against the CUDA runtime and NCCL that third_party found,
// and checks what this machine offers at run time. Without a GPU (or without
// a driver) that must read as "no GPU", never as a crash: the NCCL backend
// makes the same check before it is used.

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version <= 0) {
    fprintf(stderr, "ncclGetVersion failed\n");
    return 1;
  }
  printf("NCCL %d.%d.%d linked (header %d.%d.%d)\n", version / 10000,
         (version / 100) % 100, version % 100, NCCL_MAJOR, NCCL_MINOR,
         NCCL_PATCH);
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess) {
    printf("no GPU: %s (%s); GPU tests are skipped on this machine\n",
           cudaGetErrorString(err), cudaGetErrorName(err));
    return 0;
  }
  printf("%d CUDA device(s)\n", devices);
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess) {
      printf("  cuda:%d %s, %.1f GiB\n", d, prop.name,
             prop.totalGlobalMem / (1024.0 * 1024 * 1024));
    }
  }
  return 0;
}
