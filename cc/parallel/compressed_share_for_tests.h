// The reference for the gradient reducer's fp16 / bf16 compression hooks, as
// torch's hooks compute it: one rank's value rounded to the compressed
// type, divided by the world size there, rounded again. The expected average
// is the sum of every rank's share. Shared by the reducer's checks.

#ifndef DISTKIT_CC_PARALLEL_COMPRESSED_SHARE_FOR_TESTS_H_
#define DISTKIT_CC_PARALLEL_COMPRESSED_SHARE_FOR_TESTS_H_

#include "cc/core/half.h"
#include "cc/parallel/grad_reducer.h"

namespace distkit {

inline double CompressedShare(CommHook hook, float x, int world_size) {
  if (hook == CommHook::kFp16Compress) {
    return comm_internal::Float16ToFloat(comm_internal::FloatToFloat16(
        comm_internal::Float16ToFloat(comm_internal::FloatToFloat16(x)) /
        world_size));
  }
  return comm_internal::BFloat16ToFloat(comm_internal::FloatToBFloat16(
      comm_internal::BFloat16ToFloat(comm_internal::FloatToBFloat16(x)) /
      world_size));
}

}  // namespace distkit

#endif  // DISTKIT_CC_PARALLEL_COMPRESSED_SHARE_FOR_TESTS_H_
