#include "cc/comm/work.h"

#include "absl/strings/str_cat.h"

namespace distkit {

bool Work::Test() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

WorkState Work::state() const {
  absl::MutexLock lock(&mu_);
  if (!done_) return WorkState::kPending;
  return status_.ok() ? WorkState::kSucceeded : WorkState::kFailed;
}

absl::Status Work::Wait(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&done_), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat(description_, " did not finish within ",
                     absl::FormatDuration(timeout), " (still running)"));
  }
  return status_;
}

absl::Status Work::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

void Work::Complete(absl::Status status) {
  std::vector<std::function<void(const absl::Status&)>> callbacks;
  absl::Status final_status;
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    status_ = std::move(status);
    done_ = true;
    callbacks.swap(callbacks_);
    final_status = status_;
  }
  // Outside the lock: a callback may test or wait on this Work.
  for (auto& fn : callbacks) fn(final_status);
}

void Work::OnComplete(std::function<void(const absl::Status&)> fn) {
  absl::Status final_status;
  {
    absl::MutexLock lock(&mu_);
    if (!done_) {
      callbacks_.push_back(std::move(fn));
      return;
    }
    final_status = status_;
  }
  fn(final_status);
}

}  // namespace distkit
