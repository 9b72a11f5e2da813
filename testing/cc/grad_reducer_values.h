// What the gradient reducer's multi-rank tests compare with, computed without
// the library: the gradient every rank produces (one formula all ranks know),
// its mean over the ranks, and the fp16 / bf16 compression hooks' result as
// torch's hooks compute it, with the error the compressed type allows.

#ifndef DISTKIT_TESTING_CC_GRAD_REDUCER_VALUES_H_
#define DISTKIT_TESTING_CC_GRAD_REDUCER_VALUES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cc/core/half.h"
#include "cc/parallel/grad_reducer.h"

namespace distkit {
namespace testing {

// Gradient element k of parameter p on rank r in iteration it.
inline double GradValue(int r, int p, int64_t k, int it) {
  return 0.25 * (r + 1) * ((k % 13) - 6) + 0.5 * p - 0.125 * it;
}

// GradValue averaged over `world_size` ranks (each share divided first, as
// the reducer divides before it sums).
inline double MeanGradValue(int p, int64_t k, int it, int world_size) {
  double s = 0;
  for (int r = 0; r < world_size; ++r) {
    s += GradValue(r, p, k, it) / world_size;
  }
  return s;
}

// One rank's value rounded to the compressed type, divided by the world size
// there, rounded again; the expected average is the sum of every rank's
// share.
inline double CompressedShare(CommHook hook, float x, int world_size) {
  if (hook == CommHook::kFp16Compress) {
    return Float16ToFloat(
        FloatToFloat16(Float16ToFloat(FloatToFloat16(x)) / world_size));
  }
  return BFloat16ToFloat(
      FloatToBFloat16(BFloat16ToFloat(FloatToBFloat16(x)) / world_size));
}

// The hooks' average of GradValue(·, p, k, it): the sum of every rank's
// CompressedShare.
inline double CompressedMeanGradValue(CommHook hook, int p, int64_t k, int it,
                                      int world_size) {
  double s = 0;
  for (int r = 0; r < world_size; ++r) {
    s += CompressedShare(hook, GradValue(r, p, k, it), world_size);
  }
  return s;
}

// How far a hook's average may be from `want`: the compressed type's
// precision (float16's 10 mantissa bits, bfloat16's 7) per rank's share,
// relative to the value (absolute below 1).
inline double CompressedTolerance(CommHook hook, double want, int world_size) {
  const double precision = hook == CommHook::kFp16Compress ? 1e-3 : 8e-3;
  return precision * world_size * std::max(1.0, std::abs(want));
}

// "fp16" or "bf16", as the checks name a hook.
inline const char* CompressedTypeName(CommHook hook) {
  return hook == CommHook::kFp16Compress ? "fp16" : "bf16";
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_GRAD_REDUCER_VALUES_H_
