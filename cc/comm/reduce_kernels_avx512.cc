// The reduction loops (reduce_loops.h) compiled for AVX-512 (F, BW, VL, DQ)
// and F16C, 512-bit vectors preferred (the BUILD file's copts, on x86-64
// only). GetReduceFn and DivideBySize call into this file only where the CPU
// and OS run it (reduce_kernels_isa.h).

#if defined(__x86_64__)

#include "cc/comm/reduce_kernels_isa.h"
#include "cc/comm/reduce_loops.h"

namespace distkit {
namespace comm_internal {

ReduceFn SelectAvx512ReduceLoop(DataType dtype, ReduceOp op) {
  return SelectReduceLoop(dtype, op);
}

void Avx512DivideBySize(void* data, DataType dtype, size_t n, int divisor) {
  DivideLoop(data, dtype, n, divisor);
}

}  // namespace comm_internal
}  // namespace distkit

#endif  // defined(__x86_64__)
