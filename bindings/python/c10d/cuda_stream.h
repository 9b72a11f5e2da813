// The caller's current CUDA stream, which a CUDA operation follows (as
// torch's ProcessGroupNCCL does). Only a build against a CUDA torch knows
// it (DISTKIT_C10D_CUDA: torch's c10_cuda library is linked); elsewhere no
// CUDA tensor can exist, and the answer is the legacy default stream.

#ifndef DISTKIT_BINDINGS_PYTHON_C10D_CUDA_STREAM_H_
#define DISTKIT_BINDINGS_PYTHON_C10D_CUDA_STREAM_H_

#include <c10/core/Device.h>

namespace distkit {
namespace c10d_ext {

// A cudaStream_t; nullptr is the legacy default stream.
void* CurrentCudaStream(const c10::Device& device);

}  // namespace c10d_ext
}  // namespace distkit

#endif  // DISTKIT_BINDINGS_PYTHON_C10D_CUDA_STREAM_H_
