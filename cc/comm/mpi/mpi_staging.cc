#include "cc/comm/mpi/mpi_staging.h"

#include <algorithm>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "cc/comm/mpi/mpi_library.h"
#include "cc/comm/mpi/mpi_runtime.h"

namespace distkit {
namespace {

struct Quarantined {
  MPI_Request request;
  std::unique_ptr<MpiStage> stage;
};

// Guarded by MpiMutex() (not expressible as an annotation: it is a function's
// static).
std::vector<Quarantined>& Quarantine() {
  static auto* quarantine = new std::vector<Quarantined>;  // leaked at exit
  return *quarantine;
}

}  // namespace

void MpiStage::Reserve(size_t bytes) {
  if (bytes <= capacity_ && data_ != nullptr) return;
  // Uninitialized: every byte MPI reads is copied in first.
  constexpr size_t kPage = 4096;
  capacity_ = std::max<size_t>((bytes + kPage - 1) & ~(kPage - 1), kPage);
  data_.reset(static_cast<char*>(std::aligned_alloc(kPage, capacity_)));
  if (data_ == nullptr) std::abort();  // as new would (no exceptions)
}

std::unique_ptr<MpiStage> MpiStagePool::Acquire(size_t bytes) {
  std::unique_ptr<MpiStage> stage;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      // The smallest that fits, else the largest (grown below).
      auto fit = free_.end(), largest = free_.begin();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        const size_t cap = (*it)->capacity();
        if (cap >= bytes && (fit == free_.end() || cap < (*fit)->capacity())) {
          fit = it;
        }
        if (cap > (*largest)->capacity()) largest = it;
      }
      auto best = fit != free_.end() ? fit : largest;
      stage = std::move(*best);
      free_.erase(best);
    }
  }
  if (stage == nullptr) stage = std::make_unique<MpiStage>();
  stage->Reserve(bytes);
  return stage;
}

void MpiStagePool::Release(std::unique_ptr<MpiStage> stage) {
  if (stage == nullptr || stage->capacity() > kMaxKeptBytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.size() < kKept) free_.push_back(std::move(stage));
}

void QuarantineMpiRequestLocked(MPI_Request request,
                                std::unique_ptr<MpiStage> stage) {
  Quarantine().push_back({request, std::move(stage)});
}

void PollMpiQuarantineLocked() {
  std::vector<Quarantined>& quarantine = Quarantine();
  if (quarantine.empty()) return;
  const MpiLibrary& mpi = Mpi();
  for (size_t i = 0; i < quarantine.size();) {
    int done = 0;
    const int rc = mpi.Test(&quarantine[i].request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      // Whether MPI still holds a request that failed is not certain: its
      // stage is never freed (leaked), and it is not tested again.
      quarantine[i].stage.release();
      done = 1;
    }
    if (done) {
      quarantine[i] = std::move(quarantine.back());
      quarantine.pop_back();
    } else {
      ++i;
    }
  }
}

size_t MpiQuarantineSize() {
  absl::MutexLock lock(&MpiMutex());
  return Quarantine().size();
}

}  // namespace distkit
