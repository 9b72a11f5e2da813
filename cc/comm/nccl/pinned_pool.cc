#include "cc/comm/nccl/pinned_pool.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

size_t SizeClass(size_t bytes) {
  size_t c = 64;
  while (c < bytes) c *= 2;
  return c;
}

struct Pool {
  absl::Mutex mu;
  absl::flat_hash_map<size_t, std::vector<void*>> free ABSL_GUARDED_BY(mu);
};

// Never destroyed: groups may outlive static destruction, and the blocks
// are never freed anyway.
Pool& ThePool() {
  static Pool* pool = new Pool;
  return *pool;
}

}  // namespace

absl::StatusOr<void*> TakePinned(const CudaLibrary& cuda, size_t bytes) {
  const size_t c = SizeClass(bytes);
  {
    Pool& p = ThePool();
    absl::MutexLock lock(&p.mu);
    std::vector<void*>& blocks = p.free[c];
    if (!blocks.empty()) {
      void* block = blocks.back();
      blocks.pop_back();
      return block;
    }
  }
  void* block = nullptr;
  DK_RETURN_IF_ERROR(
      CudaStatus(cuda, cuda.MallocHost(&block, c), "cudaMallocHost"));
  return block;
}

void GivePinned(void* block, size_t bytes) {
  if (block == nullptr) return;
  Pool& p = ThePool();
  absl::MutexLock lock(&p.mu);
  p.free[SizeClass(bytes)].push_back(block);
}

}  // namespace distkit
