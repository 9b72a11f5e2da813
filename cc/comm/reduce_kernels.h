// Elementwise reductions on host memory for every (DataType, ReduceOp) pair
// distkit accepts: out[i] = op(a[i], b[i]). CPU backends hand these to Gloo as
// its reduction function and use them to combine received chunks, so every
// backend reduces identically (float16 / bfloat16: each pair in float,
// rounded once, so N ranks' sum rounds N-1 times in rank order; bool
// sum/max = or, product/min = and).
//
// kMean is not a pairwise op: reduce with kSum, then DivideBySize.

#ifndef DISTKIT_CC_COMM_REDUCE_KERNELS_H_
#define DISTKIT_CC_COMM_REDUCE_KERNELS_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "cc/core/data_type.h"
#include "cc/core/reduce_op.h"

namespace distkit {

// out may alias a or b. n is a count of elements.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// The kernel for (dtype, op). kMean maps to the kSum kernel. INVALID_ARGUMENT
// for bitwise ops on floating-point types (message names op and dtype).
absl::StatusOr<ReduceFn> GetReduceFn(DataType dtype, ReduceOp op);

// data[i] /= divisor, in place. Floating types divide (half types in float);
// integer types truncate toward zero, as mmengine's mean does when torch's
// `copy_` writes a float quotient into an integer tensor; bool becomes
// (value != 0) since any non-zero float copies to true.
void DivideBySize(void* data, DataType dtype, size_t n, int divisor);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_REDUCE_KERNELS_H_
