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

ChunkPlan::ChunkPlan(int64_t count, size_t op_bytes) : count_(count) {
  const int64_t wanted = static_cast<int64_t>(op_bytes / ChunkBytes());
  chunks_ = static_cast<int>(
      std::clamp<int64_t>(std::min<int64_t>(wanted, count), 1, kMaxChunks));
}

}  // namespace distkit
