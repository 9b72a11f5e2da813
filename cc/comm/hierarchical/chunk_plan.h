// ChunkPlan: how a hierarchical collective is cut for its link's pipeline
// (link_pipeline.h). A chunk of an all_reduce is a piece of its buffer; of
// an all_gather or reduce_scatter, the same piece of every rank's part, so
// that every chunk is a whole operation of its own over host blocks.
//
// Chunks of about kChunkBytes of the operation (its largest buffer): small
// enough that the link's stage of a chunk outlasts the host's stages of the
// next, large enough that the link's gap between two chunks (a round trip,
// a call's set-up) stays small beside a chunk's transfer. The first three
// and the last three chunks ramp from an eighth of that size up and back
// down: before the first chunk and after the last the link waits for the
// host's stages (a reduce_scatter's whole first chunk is packed and reduced
// before the link starts), so those are kept short.
// DISTKIT_HIERARCHICAL_CHUNK_BYTES replaces kChunkBytes, the same on every
// rank (the ranks must cut alike): for tests, which cut small buffers into
// many chunks.

#ifndef DISTKIT_CC_COMM_HIERARCHICAL_CHUNK_PLAN_H_
#define DISTKIT_CC_COMM_HIERARCHICAL_CHUNK_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace distkit {

class ChunkPlan {
 public:
  static constexpr size_t kChunkBytes = 2 << 20;
  static constexpr int kMaxChunks = 64;

  // `count` elements cut for an operation whose largest buffer holds
  // `op_bytes`: one chunk below twice the chunk size, at most kMaxChunks,
  // none empty.
  ChunkPlan(int64_t count, size_t op_bytes);

  int chunks() const { return static_cast<int>(begins_.size()) - 1; }
  int64_t begin(int k) const { return begins_[k]; }
  int64_t size(int k) const { return begins_[k + 1] - begins_[k]; }
  // The largest chunk's element count.
  int64_t most() const { return most_; }

  // kChunkBytes, or DISTKIT_HIERARCHICAL_CHUNK_BYTES when set.
  static size_t ChunkBytes();

 private:
  std::vector<int64_t> begins_;  // chunk k: [begins_[k], begins_[k + 1])
  int64_t most_ = 0;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_HIERARCHICAL_CHUNK_PLAN_H_
