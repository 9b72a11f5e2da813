// ScopedStoreDeadline bounds every store call the current thread makes while
// it is alive: a remote store clamps its RPC deadline and the wait time of a
// blocking call to it. The failure paths use it so that their store traffic
// cannot outlast the operation that failed (a collective's timeout diagnosis
// gets a short budget of its own; init gets the init timeout), however long
// the store's own timeout is. Scopes nest; the earliest deadline wins.
//
//   {
//     ScopedStoreDeadline budget(absl::Now() + absl::Seconds(2));
//     absl::StatusOr<bool> present = store.Check({key});  // at most ~2 s
//   }

#ifndef DISTKIT_CC_STORE_CALL_DEADLINE_H_
#define DISTKIT_CC_STORE_CALL_DEADLINE_H_

#include "absl/time/time.h"

namespace distkit {

class ScopedStoreDeadline {
 public:
  explicit ScopedStoreDeadline(absl::Time deadline);
  ~ScopedStoreDeadline();
  ScopedStoreDeadline(const ScopedStoreDeadline&) = delete;
  ScopedStoreDeadline& operator=(const ScopedStoreDeadline&) = delete;

 private:
  absl::Time saved_;
};

// The deadline of the innermost scope on this thread; InfiniteFuture if none.
absl::Time StoreCallDeadline();

// `budget` from now, cut to the thread's store deadline (never negative).
absl::Duration ClampToStoreDeadline(absl::Duration budget);

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_CALL_DEADLINE_H_
