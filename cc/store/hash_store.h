// File: hash_store.h
//
// HashStore is an in-process Store: a mutex-guarded map whose blocking calls
// wait on absl::Mutex conditions. StoreServer keeps its state in one, so the
// semantics of every Store operation are written once, here.

#ifndef DISTKIT_CC_STORE_HASH_STORE_H_
#define DISTKIT_CC_STORE_HASH_STORE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "cc/store/store.h"

namespace distkit {

class HashStore : public Store {
 public:
  // Returns true when a blocked caller has gone away (a cancelled RPC); the
  // wait then ends with CANCELLED instead of holding a thread until timeout.
  using CancelledFn = std::function<bool()>;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status WaitWithTimeout(absl::Span<const std::string> keys,
                               absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  absl::StatusOr<std::vector<std::string>> MultiGetWithTimeout(
      absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override;
  absl::Status Append(absl::string_view key, absl::string_view value) override;

  // The blocking operations with an explicit timeout and cancellation check,
  // for StoreServer.
  absl::Status WaitFor(absl::Span<const std::string> keys,
                       absl::Duration timeout, const CancelledFn& cancelled);
  absl::StatusOr<std::vector<std::string>> MultiGetFor(
      absl::Span<const std::string> keys, absl::Duration timeout,
      const CancelledFn& cancelled);

 private:
  bool AllPresent(const std::vector<std::string>* keys) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits with mu_ held until all `keys` exist.
  absl::Status AwaitKeys(absl::Span<const std::string> keys,
                         absl::Duration timeout, const CancelledFn& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_HASH_STORE_H_
