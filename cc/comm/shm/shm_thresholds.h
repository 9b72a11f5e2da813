// The sizes at which the same-host paths (ShmBackend) switch algorithm, the
// same on every rank of a group. Measured, not assumed: the numbers behind
// them are in tools/dkbench/RESULTS.md.

#ifndef DISTKIT_CC_COMM_SHM_SHM_THRESHOLDS_H_
#define DISTKIT_CC_COMM_SHM_SHM_THRESHOLDS_H_

#include <cstddef>

#include "cc/comm/shm/shm_segment.h"

namespace distkit {

// all_reduce and reduce of more than this many bytes go by slices.
inline constexpr size_t kSliceReduceFromBytes = size_t{16} << 10;
static_assert(kSliceReduceFromBytes <= ShmLayout::kMinSlotBytes,
              "one step, one slot");
// A broadcast over the slots sends its first chunk of this size, and each
// next one twice the last, up to a slot (a core per rank).
inline constexpr size_t kFirstBroadcastChunk = size_t{64} << 10;
// all_reduce, broadcast, all_gather and reduce_scatter of at least this many
// bytes (the larger buffer) read peers' buffers directly (single_copy.h)
// where the kernel allows it; peers are folded in pieces of kFoldPieceBytes
// (two in cache at a time).
inline constexpr size_t kSingleCopyFromBytes = size_t{64} << 10;
inline constexpr size_t kFoldPieceBytes = size_t{128} << 10;
// With more ranks than cores, an all_reduce takes single copy from here
// (with a core per rank, from past kSliceReduceFromBytes).
inline constexpr size_t kSingleCopyAllReduceFromBytes = size_t{1} << 20;
// ... and a gather or scatter from here.
inline constexpr size_t kSingleCopyRootedFromBytes = size_t{256} << 10;

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SHM_THRESHOLDS_H_
