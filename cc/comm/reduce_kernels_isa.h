// The instruction-set variants of the reduction loops (reduce_loops.h) and
// which of them this CPU runs. GetReduceFn and DivideBySize use the widest;
// tests and benchmarks compare them (DISTKIT_REDUCE_ISA=baseline|avx2|avx512 in
// the environment picks one by name, where this CPU runs it).

#ifndef DISTKIT_CC_COMM_REDUCE_KERNELS_ISA_H_
#define DISTKIT_CC_COMM_REDUCE_KERNELS_ISA_H_

#include <vector>

#include "cc/comm/reduce_kernels.h"

namespace distkit {
namespace comm_internal {

// The kernel for a supported (dtype, op) pair, from one variant.
using ReduceLoopSelector = ReduceFn (*)(DataType dtype, ReduceOp op);

// DivideBySize, from one variant.
using DivideLoopFn = void (*)(void* data, DataType dtype, size_t n,
                              int divisor);

struct ReduceKernelVariant {
  const char* name;  // "baseline", "avx2", "avx512"
  ReduceLoopSelector select;
  DivideLoopFn divide;
};

// The baseline first, then each wider variant this CPU and its OS run, in
// order of width.
std::vector<ReduceKernelVariant> ReduceKernelVariants();

// One per translation unit (x86-64 only for the wide ones).
ReduceFn SelectBaselineReduceLoop(DataType dtype, ReduceOp op);
ReduceFn SelectAvx2ReduceLoop(DataType dtype, ReduceOp op);
ReduceFn SelectAvx512ReduceLoop(DataType dtype, ReduceOp op);
void BaselineDivideBySize(void* data, DataType dtype, size_t n, int divisor);
void Avx2DivideBySize(void* data, DataType dtype, size_t n, int divisor);
void Avx512DivideBySize(void* data, DataType dtype, size_t n, int divisor);

}  // namespace comm_internal
}  // namespace distkit

#endif  // DISTKIT_CC_COMM_REDUCE_KERNELS_ISA_H_
