#include "cc/comm/hierarchical/link_pipeline.h"

#include <utility>

namespace distkit {

LinkPipeline::LinkPipeline(int chunks, std::function<absl::Status(int)> link)
    : chunks_(chunks), link_(std::move(link)) {
  if (chunks_ > 1) thread_ = std::thread([this] { Run(); });
}

LinkPipeline::~LinkPipeline() {
  Stop();
  if (thread_.joinable()) thread_.join();
}

void LinkPipeline::Ready(int k) {
  if (chunks_ <= 1) {
    // Not cut: the link's stage runs here, as a stage of its own.
    absl::Status status = link_(k);
    absl::MutexLock lock(&mu_);
    status_.Update(status);
    if (status.ok()) done_ = k + 1;
    return;
  }
  absl::MutexLock lock(&mu_);
  ready_ = k + 1;
}

absl::Status LinkPipeline::Done(int k) {
  absl::MutexLock lock(&mu_);
  auto finished = [this, k]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return done_ > k || !status_.ok() || stopped_;
  };
  mu_.Await(absl::Condition(&finished));
  if (done_ > k) return absl::OkStatus();
  if (!status_.ok()) return status_;
  return absl::CancelledError("the operation stopped before its link stage");
}

void LinkPipeline::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

void LinkPipeline::Run() {
  for (int k = 0; k < chunks_; ++k) {
    {
      absl::MutexLock lock(&mu_);
      auto startable = [this, k]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return ready_ > k || stopped_;
      };
      mu_.Await(absl::Condition(&startable));
      // Stopped: no further chunk moves, even one made ready before.
      if (stopped_) return;
    }
    absl::Status status = link_(k);
    absl::MutexLock lock(&mu_);
    if (!status.ok()) {
      status_ = std::move(status);
      return;
    }
    done_ = k + 1;
  }
}

}  // namespace distkit
