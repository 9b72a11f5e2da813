// HashStore is an in-process Store: a mutex-guarded map whose blocking calls
// wait on absl::Mutex conditions. StoreServer keeps its state in one, so the
// semantics of every Store operation are written once, here.

#ifndef DISTKIT_CC_STORE_HASH_STORE_H_
#define DISTKIT_CC_STORE_HASH_STORE_H_

#include <cstdint>
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

  // For StoreServer, which parks blocked requests itself instead of holding a
  // thread per wait. The index of the first of keys[from..] that is absent;
  // when none is, the first of keys[..from) that is (deleted since it was
  // seen), or keys.size() when every key is present. With `values`, also
  // their values in order when every key is present, unless they hold more
  // than `max_value_bytes` in all: then nothing is copied (an answer too
  // large to send is never built). `value_bytes`, when given, gets their
  // total either way.
  size_t FirstMissing(absl::Span<const std::string> keys, size_t from = 0,
                      std::vector<std::string>* values = nullptr,
                      size_t max_value_bytes = SIZE_MAX,
                      size_t* value_bytes = nullptr) const;
  // Append for StoreServer: RESOURCE_EXHAUSTED, appending nothing, when the
  // value would grow past `max_value_bytes`, so that every value the server
  // holds fits in an answer (appends could otherwise grow one without bound).
  absl::Status AppendAtMost(absl::string_view key, absl::string_view value,
                            size_t max_value_bytes);
  // The DEADLINE_EXCEEDED of a wait for `keys` that ran out after `timeout`,
  // naming the keys still absent.
  absl::Status TimedOut(absl::Span<const std::string> keys,
                        absl::Duration timeout) const;
  // Checks every write of the Store interface against the store's request
  // limits (request_limits.h), as StoreServer checks its clients': the
  // server's state is also written directly by its host process, and a value
  // over the limit could be in no answer. Set once, before use.
  void EnforceRequestLimits() { limits_ = true; }
  // Called after every change, outside the lock, so that StoreServer notices
  // changes its host process makes directly. Set once, before use.
  void SetChangeListener(std::function<void()> listener) {
    listener_ = std::move(listener);
  }

 private:
  bool AllPresent(const std::vector<std::string>* keys) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Waits with mu_ held until all `keys` exist.
  absl::Status AwaitKeys(absl::Span<const std::string> keys,
                         absl::Duration timeout, const CancelledFn& cancelled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status TimedOutLocked(absl::Span<const std::string> keys,
                              absl::Duration timeout) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Changed() const {
    if (listener_) listener_();
  }
  // Declared before a function's lock: tells the listener once it is released.
  struct ChangeNotice {
    const HashStore* store;
    ~ChangeNotice() { store->Changed(); }
  };

  // OK, or why a write of `keys` and `value_bytes` is refused.
  absl::Status CheckWrite(absl::string_view op,
                          absl::Span<const absl::string_view> keys,
                          size_t value_bytes) const;

  std::function<void()> listener_;
  bool limits_ = false;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_HASH_STORE_H_
