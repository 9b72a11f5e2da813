// Store is the rendezvous key-value service every rank of a job shares, with
// torch c10d Store semantics. Values are byte strings. `Get`, `Wait` and
// `MultiGet` block until the keys exist or the timeout expires
// (DEADLINE_EXCEEDED naming the missing keys); `Add` is an atomic counter.
//
// Implementations: TcpStore (a client of StoreServer, across processes and
// hosts), HashStore (in-process) and PrefixStore (a namespace over another).
//
//   DK_ASSIGN_OR_RETURN(int64_t arrived, store.Add("barrier/0", 1));
//   DK_RETURN_IF_ERROR(store.Wait({"rank0/addr"}));
//   DK_ASSIGN_OR_RETURN(std::string addr, store.Get("rank0/addr"));

#ifndef DISTKIT_CC_STORE_STORE_H_
#define DISTKIT_CC_STORE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace distkit {

class Store {
 public:
  // c10d's default store timeout.
  static constexpr absl::Duration kDefaultTimeout = absl::Seconds(300);

  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any earlier value, and wakes waiters.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // Returns the value of `key`, blocking until it exists or the timeout
  // (default timeout()) passes.
  absl::StatusOr<std::string> Get(absl::string_view key) {
    return Get(key, timeout());
  }
  absl::StatusOr<std::string> Get(absl::string_view key,
                                  absl::Duration timeout);

  // Adds `delta` to the integer at `key` (absent counts as 0) and returns the
  // new value. A value that is not a decimal integer is INVALID_ARGUMENT.
  virtual absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;

  // Atomically: if `key` holds `expected` (or is absent and `expected` is
  // empty), sets it to `desired` and returns `desired`; otherwise returns the
  // current value (or `expected` when the key is absent), changing nothing.
  virtual absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                                 absl::string_view expected,
                                                 absl::string_view desired) = 0;

  // Blocks until every key in `keys` exists, or the timeout passes.
  absl::Status Wait(absl::Span<const std::string> keys) {
    return WaitWithTimeout(keys, timeout());
  }
  absl::Status Wait(absl::Span<const std::string> keys,
                    absl::Duration timeout) {
    return WaitWithTimeout(keys, timeout);
  }
  virtual absl::Status WaitWithTimeout(absl::Span<const std::string> keys,
                                       absl::Duration timeout) = 0;

  // Whether every key in `keys` exists now. Does not block.
  virtual absl::StatusOr<bool> Check(absl::Span<const std::string> keys) = 0;

  // Removes `key`; returns whether it existed.
  virtual absl::StatusOr<bool> DeleteKey(absl::string_view key) = 0;

  // The number of keys in the whole store (a PrefixStore counts every key, as
  // c10d's does).
  virtual absl::StatusOr<int64_t> NumKeys() = 0;

  // Gets several keys at once, blocking until all exist or the timeout passes.
  absl::StatusOr<std::vector<std::string>> MultiGet(
      absl::Span<const std::string> keys) {
    return MultiGetWithTimeout(keys, timeout());
  }
  virtual absl::StatusOr<std::vector<std::string>> MultiGetWithTimeout(
      absl::Span<const std::string> keys, absl::Duration timeout) = 0;

  // Sets several keys at once; `keys` and `values` have the same length.
  virtual absl::Status MultiSet(absl::Span<const std::string> keys,
                                absl::Span<const std::string> values) = 0;

  // Appends `value` to the value of `key` (creating it if absent).
  virtual absl::Status Append(absl::string_view key,
                              absl::string_view value) = 0;

  // The "host:port" of the server this store is a client of (TcpStore),
  // empty for a store in this process. Ranks listen on the interface that
  // reaches it (cc/comm/gloo/listen_address.h).
  virtual std::string ServerAddress() const { return ""; }

  // The timeout of Get, MultiGet and Wait without an explicit timeout.
  absl::Duration timeout() const { return timeout_; }
  void set_timeout(absl::Duration timeout) { timeout_ = timeout; }

 private:
  absl::Duration timeout_ = kDefaultTimeout;
};

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_STORE_H_
