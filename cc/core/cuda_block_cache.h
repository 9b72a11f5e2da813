// Device memory kept for reuse. DeviceBuffer's CUDA allocations come from
// here, so steady-state training (FlatShard's gathers, the reducer's
// staging, the casting rule's copies, the group's staging) makes no
// cudaMalloc or cudaFree per operation: both cost tens of microseconds, and
// cudaFree synchronizes the whole device, a known deadlock beside NCCL's
// kernels. Sizes are rounded up to a class (powers of two from 512 bytes,
// then multiples of 2 MiB from 1 MiB), per device; a freed block waits for
// the next request of its class. When the device runs out of memory the
// device's cached blocks are given back and the allocation tried once more.
// Internal to cc/core; callers use DeviceBuffer (device_copy.h).

#ifndef DISTKIT_CC_CORE_CUDA_BLOCK_CACHE_H_
#define DISTKIT_CC_CORE_CUDA_BLOCK_CACHE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "cc/core/device.h"

namespace distkit {
namespace cuda_block_cache {

// The class `bytes` is rounded up to.
size_t SizeClass(size_t bytes);

// A block of SizeClass(bytes) bytes on `device`: a cached one, else a new
// one.
absl::StatusOr<void*> Take(Device device, size_t bytes);

// Gives back a block Take returned for `bytes`.
void Put(Device device, void* block, size_t bytes);

// Frees every cached block (all devices when `device` is the CPU); returns
// the bytes given back.
size_t Release(Device device);

}  // namespace cuda_block_cache
}  // namespace distkit

#endif  // DISTKIT_CC_CORE_CUDA_BLOCK_CACHE_H_
