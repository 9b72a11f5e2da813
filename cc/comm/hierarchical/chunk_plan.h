// ChunkPlan: how a hierarchical collective is cut for its link's pipeline
// (link_pipeline.h). A chunk of an all_reduce is a piece of its buffer; of
// an all_gather or reduce_scatter, the same piece of every rank's part, so
// that every chunk is a whole operation of its own over host blocks.
//
// Chunks of about kChunkBytes of the operation (its largest buffer): small
// enough that the stages inside a host before the first chunk and after the
// last one are short, large enough that the link's gap between two chunks
// (one round trip, a call's set-up) stays small beside a chunk's transfer.
// DISTKIT_HIERARCHICAL_CHUNK_BYTES replaces it, the same on every rank (the
// ranks must cut alike): for tests, which cut small buffers into many chunks.

#ifndef DISTKIT_CC_COMM_HIERARCHICAL_CHUNK_PLAN_H_
#define DISTKIT_CC_COMM_HIERARCHICAL_CHUNK_PLAN_H_

#include <cstddef>
#include <cstdint>

namespace distkit {

class ChunkPlan {
 public:
  static constexpr size_t kChunkBytes = 2 << 20;
  static constexpr int kMaxChunks = 64;

  // `count` elements cut for an operation whose largest buffer holds
  // `op_bytes`: one chunk below twice the chunk size, never more chunks
  // than elements.
  ChunkPlan(int64_t count, size_t op_bytes);

  int chunks() const { return chunks_; }
  int64_t begin(int k) const { return count_ * k / chunks_; }
  int64_t size(int k) const { return begin(k + 1) - begin(k); }
  // The largest chunk's element count.
  int64_t most() const { return size(0) + (count_ % chunks_ != 0); }

  // kChunkBytes, or DISTKIT_HIERARCHICAL_CHUNK_BYTES when set.
  static size_t ChunkBytes();

 private:
  int64_t count_;
  int chunks_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_HIERARCHICAL_CHUNK_PLAN_H_
