#include "bindings/python/c10d/cuda_stream.h"

#ifdef DISTKIT_C10D_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace distkit {
namespace c10d_ext {

void* CurrentCudaStream(const c10::Device& device) {
#ifdef DISTKIT_C10D_CUDA
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
#else
  (void)device;
  return nullptr;
#endif
}

}  // namespace c10d_ext
}  // namespace distkit
