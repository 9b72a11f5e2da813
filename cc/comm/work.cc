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
  absl::MutexLock lock(&mu_);
  if (done_) return;
  status_ = std::move(status);
  done_ = true;
}

}  // namespace distkit
