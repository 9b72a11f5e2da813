#include "cc/core/cuda_block_cache.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "cc/core/cuda_memory.h"

namespace distkit {
namespace cuda_block_cache {
namespace {

constexpr size_t kSmallest = 512;
constexpr size_t kLarge = size_t{1} << 20;
constexpr size_t kLargeStep = size_t{2} << 20;

struct Cache {
  absl::Mutex mu;
  // (device index, size class) -> free blocks.
  std::map<std::pair<int, size_t>, std::vector<void*>> free ABSL_GUARDED_BY(mu);
};

Cache& TheCache() {
  static Cache* const cache = new Cache;  // never destroyed: blocks outlive
  return *cache;                          // static destructors
}

}  // namespace

size_t SizeClass(size_t bytes) {
  if (bytes >= kLarge)
    return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  size_t size = kSmallest;
  while (size < bytes) size <<= 1;
  return size;
}

absl::StatusOr<void*> Take(Device device, size_t bytes) {
  const size_t size = SizeClass(bytes);
  Cache& cache = TheCache();
  {
    absl::MutexLock lock(&cache.mu);
    auto it = cache.free.find({device.index, size});
    if (it != cache.free.end() && !it->second.empty()) {
      void* block = it->second.back();
      it->second.pop_back();
      return block;
    }
  }
  absl::StatusOr<void*> block = cuda_memory::Allocate(device, size);
  if (block.ok() || Release(device) == 0) return block;
  return cuda_memory::Allocate(device, size);  // with the cache given back
}

void Put(Device device, void* block, size_t bytes) {
  Cache& cache = TheCache();
  absl::MutexLock lock(&cache.mu);
  cache.free[{device.index, SizeClass(bytes)}].push_back(block);
}

size_t Release(Device device) {
  std::vector<std::pair<int, void*>> blocks;
  size_t released = 0;
  {
    Cache& cache = TheCache();
    absl::MutexLock lock(&cache.mu);
    for (auto it = cache.free.begin(); it != cache.free.end();) {
      if (!device.is_cpu() && it->first.first != device.index) {
        ++it;
        continue;
      }
      for (void* b : it->second) {
        blocks.push_back({it->first.first, b});
        released += it->first.second;
      }
      it = cache.free.erase(it);
    }
  }
  for (const auto& [index, block] : blocks) {
    cuda_memory::Free(Device::Cuda(index), block);
  }
  return released;
}

}  // namespace cuda_block_cache
}  // namespace distkit
