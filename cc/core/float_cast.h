// Converting floating-point elements between float16, bfloat16, float32 and
// float64 on host memory (round to nearest even, as torch's .to() does), for
// mixed precision: a sharded unit keeps float32 master values and gathers,
// computes and reduces in a lower precision.

#ifndef DISTKIT_CC_CORE_FLOAT_CAST_H_
#define DISTKIT_CC_CORE_FLOAT_CAST_H_

#include <cstddef>

#include "absl/status/status.h"
#include "cc/core/data_type.h"

namespace distkit {

// dst[i] = src[i] converted; same dtype is a copy. Non-floating dtypes are
// INVALID_ARGUMENT naming them. src and dst must not overlap unless equal.
absl::Status CastFloats(const void* src, DataType src_dtype, void* dst,
                        DataType dst_dtype, size_t n);

// dst[i] += src[i] converted to dst's dtype (computed in double for float64
// destinations, in float otherwise).
absl::Status AddFloats(const void* src, DataType src_dtype, void* dst,
                       DataType dst_dtype, size_t n);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_FLOAT_CAST_H_
