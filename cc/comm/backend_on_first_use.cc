#include "cc/comm/backend_on_first_use.h"

#include <utility>

namespace distkit {

BackendOnFirstUse::BackendOnFirstUse(Factory make) : make_(std::move(make)) {}

absl::StatusOr<Backend*> BackendOnFirstUse::Get() {
  Backend* made = made_.load(std::memory_order_acquire);
  if (made != nullptr) return made;
  absl::MutexLock lock(&mu_);
  // As an aborted Gloo operation ends (a peer's or the group's abort is
  // CANCELLED, which elastic recovery takes for a lost group).
  if (aborted_) return absl::CancelledError("the group was aborted");
  if (backend_ != nullptr) return backend_.get();
  if (!failed_.ok()) return failed_;
  absl::StatusOr<std::unique_ptr<Backend>> backend = make_();
  make_ = nullptr;  // what it captured (a store) is not held any longer
  if (!backend.ok()) {
    failed_ = backend.status();
    return failed_;
  }
  backend_ = *std::move(backend);
  made_.store(backend_.get(), std::memory_order_release);
  return backend_.get();
}

void BackendOnFirstUse::Abort() {
  absl::MutexLock lock(&mu_);
  aborted_ = true;
  if (backend_ != nullptr) backend_->Abort();
}

}  // namespace distkit
