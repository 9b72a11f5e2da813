#include "cc/store/call_deadline.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace distkit {
namespace {

thread_local absl::Time current_deadline = absl::InfiniteFuture();

}  // namespace

ScopedStoreDeadline::ScopedStoreDeadline(absl::Time deadline)
    : saved_(current_deadline) {
  current_deadline = std::min(current_deadline, deadline);
}

ScopedStoreDeadline::~ScopedStoreDeadline() { current_deadline = saved_; }

absl::Time StoreCallDeadline() { return current_deadline; }

absl::Duration ClampToStoreDeadline(absl::Duration budget) {
  if (current_deadline == absl::InfiniteFuture()) return budget;
  const absl::Duration left = current_deadline - absl::Now();
  return std::max(absl::ZeroDuration(), std::min(budget, left));
}

}  // namespace distkit
