#include "cc/comm/hierarchical/chunk_plan.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"

namespace distkit {

size_t ChunkPlan::ChunkBytes() {
  static const size_t bytes = [] {
    const char* value = std::getenv("DISTKIT_HIERARCHICAL_CHUNK_BYTES");
    uint64_t parsed = 0;
    if (value != nullptr && absl::SimpleAtoi(value, &parsed) && parsed > 0) {
      return static_cast<size_t>(parsed);
    }
    return kChunkBytes;
  }();
  return bytes;
}

ChunkPlan::ChunkPlan(int64_t count, size_t op_bytes) {
  // Weights in eighths of a full chunk: 1, 2, 4, 8 ... 8, 4, 2, 1 for an
  // operation of `full` chunk sizes (the middle ones fill the rest).
  const int64_t full = std::min<int64_t>(
      static_cast<int64_t>(op_bytes / ChunkBytes()), kMaxChunks - 4);
  std::vector<int64_t> weights;
  if (full >= 2) {
    weights = {1, 2, 4};
    for (int64_t i = 0; i < full - 2; ++i) weights.push_back(8);
    weights.insert(weights.end(), {4, 2, 1});
  } else {
    weights = {1};
  }
  int64_t total = 0;
  for (int64_t w : weights) total += w;
  begins_ = {0};
  int64_t sum = 0;
  for (int64_t w : weights) {
    sum += w;
    // Rounded down, so small counts leave some chunks empty: dropped.
    const int64_t end = count * sum / total;
    if (end > begins_.back()) begins_.push_back(end);
  }
  if (begins_.size() == 1) begins_.push_back(count);  // count 0: one chunk
  for (int k = 0; k < chunks(); ++k) most_ = std::max(most_, size(k));
}

}  // namespace distkit
