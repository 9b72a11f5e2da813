#include "cc/parallel/bucket_assignment.h"

#include <algorithm>
#include <map>

namespace distkit {

std::vector<int> ReverseOrder(int n) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

std::vector<std::vector<int>> AssignBuckets(absl::Span<const ParamShape> params,
                                            absl::Span<const int> order,
                                            size_t first_bucket_bytes,
                                            size_t bucket_bytes) {
  struct Open {
    std::vector<int> indices;
    size_t bytes = 0;
  };
  // One open bucket per dtype; closed buckets in the order they were opened.
  std::map<DataType, Open> open;
  std::vector<std::vector<int>> closed;
  std::vector<size_t> position;  // order position of each bucket's first index
  std::map<DataType, size_t> open_position;
  bool first = true;
  for (size_t k = 0; k < order.size(); ++k) {
    const int i = order[k];
    const ParamShape& p = params[i];
    Open& bucket = open[p.dtype];
    if (bucket.indices.empty()) open_position[p.dtype] = k;
    bucket.indices.push_back(i);
    bucket.bytes += static_cast<size_t>(p.numel) * ElementSize(p.dtype);
    const size_t limit = first ? first_bucket_bytes : bucket_bytes;
    if (bucket.bytes >= limit) {
      closed.push_back(std::move(bucket.indices));
      position.push_back(open_position[p.dtype]);
      bucket = Open();
      first = false;
    }
  }
  for (auto& [dtype, bucket] : open) {
    if (!bucket.indices.empty()) {
      closed.push_back(std::move(bucket.indices));
      position.push_back(open_position[dtype]);
    }
  }
  // Launch order: by the position of each bucket's first parameter.
  std::vector<int> by_position(closed.size());
  for (size_t b = 0; b < closed.size(); ++b) by_position[b] = b;
  std::stable_sort(by_position.begin(), by_position.end(),
                   [&](int a, int b) { return position[a] < position[b]; });
  std::vector<std::vector<int>> buckets;
  for (int b : by_position) buckets.push_back(std::move(closed[b]));
  return buckets;
}

}  // namespace distkit
