// Which gradients share a bucket (one all_reduce each). Parameters are taken
// in a given order (reverse registration order at first: backward produces
// the last layers' gradients first; after the first iteration, the order in
// which gradients actually became ready), grouped by dtype, and a bucket is
// closed once it holds at least its size limit: the first bucket's limit is
// `first_bucket_bytes` (small, so the first all_reduce starts early in
// backward), the others' `bucket_bytes`.

#ifndef DISTKIT_CC_PARALLEL_BUCKET_ASSIGNMENT_H_
#define DISTKIT_CC_PARALLEL_BUCKET_ASSIGNMENT_H_

#include <cstddef>
#include <vector>

#include "absl/types/span.h"
#include "cc/core/data_type.h"

namespace distkit {

struct ParamShape {
  int64_t numel = 0;
  DataType dtype = DataType::kFloat32;
};

// Returns the buckets as lists of parameter indices, in launch order; every
// index of `order` appears in exactly one bucket, in `order`'s order. Buckets
// of different dtypes are kept apart; a bucket's position is that of its
// first parameter in `order`.
std::vector<std::vector<int>> AssignBuckets(absl::Span<const ParamShape> params,
                                            absl::Span<const int> order,
                                            size_t first_bucket_bytes,
                                            size_t bucket_bytes);

// Reverse registration order: n-1, ..., 0.
std::vector<int> ReverseOrder(int n);

}  // namespace distkit

#endif  // DISTKIT_CC_PARALLEL_BUCKET_ASSIGNMENT_H_
