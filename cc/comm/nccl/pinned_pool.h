// Pinned host memory that is taken and given back but never freed while the
// process runs: cudaFreeHost (as cudaFree) waits for all of the device's
// work, so a group that freed its pinned buffer at destruction would wait for
// other groups' operations, which may wait for peers that are themselves
// waiting for this destruction (a deadlock until another op's timeout).
// Blocks are kept by size class (powers of two) and reused across groups.

#ifndef DISTKIT_CC_COMM_NCCL_PINNED_POOL_H_
#define DISTKIT_CC_COMM_NCCL_PINNED_POOL_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "cc/core/cuda_library.h"

namespace distkit {

// A pinned block of at least `bytes`: a free one of its size class, else a
// new one from cudaMallocHost. Thread-safe.
absl::StatusOr<void*> TakePinned(const CudaLibrary& cuda, size_t bytes);

// Hands a block from TakePinned(…, bytes) back for reuse; never freed.
void GivePinned(void* block, size_t bytes);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_NCCL_PINNED_POOL_H_
