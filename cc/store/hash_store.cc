#include "cc/store/hash_store.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/store/call_deadline.h"
#include "cc/store/request_limits.h"

namespace distkit {
namespace {

// How often a blocked wait re-checks its cancellation function.
constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(100);

std::string QuoteKeys(absl::Span<const std::string> keys) {
  return absl::StrJoin(keys, ", ", [](std::string* out, const std::string& k) {
    absl::StrAppend(out, "\"", k, "\"");
  });
}

}  // namespace

bool HashStore::AllPresent(const std::vector<std::string>* keys) const {
  for (const std::string& k : *keys) {
    if (!map_.contains(k)) return false;
  }
  return true;
}

absl::Status HashStore::AwaitKeys(absl::Span<const std::string> keys,
                                  absl::Duration timeout,
                                  const CancelledFn& cancelled) {
  const std::vector<std::string> wanted(keys.begin(), keys.end());
  timeout = ClampToStoreDeadline(timeout);
  const absl::Time deadline = absl::Now() + timeout;
  struct Pending {
    const HashStore* store;
    const std::vector<std::string>* keys;
    static bool Ready(Pending* p) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return p->store->AllPresent(p->keys);
    }
  } pending{this, &wanted};
  const absl::Condition ready(&Pending::Ready, &pending);
  while (!AllPresent(&wanted)) {
    absl::Time slice = deadline;
    if (cancelled)
      slice = std::min(deadline, absl::Now() + kCancelPollInterval);
    mu_.AwaitWithDeadline(ready, slice);
    if (AllPresent(&wanted)) break;
    if (cancelled && cancelled()) {
      return absl::CancelledError("store: the waiting client went away");
    }
    if (absl::Now() >= deadline) {
      return TimedOutLocked(wanted, timeout);
    }
  }
  return absl::OkStatus();
}

absl::Status HashStore::TimedOutLocked(absl::Span<const std::string> keys,
                                       absl::Duration timeout) const {
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (!map_.contains(k)) missing.push_back(k);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("store: timed out after ", absl::FormatDuration(timeout),
                   " waiting for key(s) ", QuoteKeys(missing)));
}

absl::Status HashStore::TimedOut(absl::Span<const std::string> keys,
                                 absl::Duration timeout) const {
  absl::ReaderMutexLock lock(&mu_);
  return TimedOutLocked(keys, timeout);
}

size_t HashStore::FirstMissing(absl::Span<const std::string> keys, size_t from,
                               std::vector<std::string>* values,
                               size_t max_value_bytes,
                               size_t* value_bytes) const {
  absl::ReaderMutexLock lock(&mu_);
  for (size_t i = from; i < keys.size(); ++i) {
    if (!map_.contains(keys[i])) return i;
  }
  // keys[0..from) were present when last looked, but one may have been
  // deleted since: look again (once per completion, so still O(N) in all),
  // for a wait as for a multi_get, as the in-process waits do.
  for (size_t i = 0; i < from; ++i) {
    if (!map_.contains(keys[i])) return i;
  }
  if (values != nullptr) {
    values->clear();
    // Sized before anything is copied: one key asked 1000 times is 1000
    // copies of its value.
    size_t total = 0;
    for (const std::string& k : keys) total += map_.find(k)->second.size();
    if (value_bytes != nullptr) *value_bytes = total;
    if (total > max_value_bytes) return keys.size();
    values->reserve(keys.size());
    for (const std::string& k : keys) values->push_back(map_.find(k)->second);
  }
  return keys.size();
}

absl::Status HashStore::CheckWrite(absl::string_view op,
                                   absl::Span<const absl::string_view> keys,
                                   size_t value_bytes) const {
  if (!limits_) return absl::OkStatus();
  return CheckStoreRequest(op, keys, value_bytes);
}

absl::Status HashStore::Set(absl::string_view key, absl::string_view value) {
  if (absl::Status bad = CheckWrite("set", {key}, value.size()); !bad.ok()) {
    return bad;
  }
  {
    absl::MutexLock lock(&mu_);
    map_[key] = std::string(value);
  }
  Changed();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> HashStore::Add(absl::string_view key, int64_t delta) {
  if (absl::Status bad = CheckWrite("add", {key}, 0); !bad.ok()) return bad;
  const ChangeNotice notice{this};
  absl::MutexLock lock(&mu_);
  int64_t value = 0;
  auto it = map_.find(key);
  if (it != map_.end() && !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store: add on key \"", key, "\" whose value is not an integer"));
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return absl::OutOfRangeError(absl::StrCat(
        "store: add of ", delta, " to key \"", key, "\" overflows int64"));
  }
  map_[key] = absl::StrCat(value);
  return value;
}

absl::StatusOr<std::string> HashStore::CompareSet(absl::string_view key,
                                                  absl::string_view expected,
                                                  absl::string_view desired) {
  if (absl::Status bad =
          CheckWrite("compare_set", {key}, expected.size() + desired.size());
      !bad.ok()) {
    return bad;
  }
  const ChangeNotice notice{this};
  absl::MutexLock lock(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    if (expected.empty()) {
      map_[key] = std::string(desired);
      return std::string(desired);
    }
    return std::string(expected);
  }
  if (it->second == expected) {
    it->second = std::string(desired);
    return std::string(desired);
  }
  return it->second;
}

absl::Status HashStore::WaitWithTimeout(absl::Span<const std::string> keys,
                                        absl::Duration timeout) {
  return WaitFor(keys, timeout, nullptr);
}

absl::Status HashStore::WaitFor(absl::Span<const std::string> keys,
                                absl::Duration timeout,
                                const CancelledFn& cancelled) {
  absl::MutexLock lock(&mu_);
  return AwaitKeys(keys, timeout, cancelled);
}

absl::StatusOr<bool> HashStore::Check(absl::Span<const std::string> keys) {
  absl::ReaderMutexLock lock(&mu_);
  for (const std::string& k : keys) {
    if (!map_.contains(k)) return false;
  }
  return true;
}

absl::StatusOr<bool> HashStore::DeleteKey(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  return map_.erase(key) > 0;
}

absl::StatusOr<int64_t> HashStore::NumKeys() {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(map_.size());
}

absl::StatusOr<std::vector<std::string>> HashStore::MultiGetWithTimeout(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  return MultiGetFor(keys, timeout, nullptr);
}

absl::StatusOr<std::vector<std::string>> HashStore::MultiGetFor(
    absl::Span<const std::string> keys, absl::Duration timeout,
    const CancelledFn& cancelled) {
  absl::MutexLock lock(&mu_);
  absl::Status ready = AwaitKeys(keys, timeout, cancelled);
  if (!ready.ok()) return ready;
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& k : keys) values.push_back(map_.find(k)->second);
  return values;
}

absl::Status HashStore::MultiSet(absl::Span<const std::string> keys,
                                 absl::Span<const std::string> values) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat("store: multi_set got ",
                                                   keys.size(), " keys and ",
                                                   values.size(), " values"));
  }
  if (limits_) {
    size_t value_bytes = 0;
    for (const std::string& v : values) value_bytes += v.size();
    if (absl::Status bad = CheckStoreRequest("multi_set", keys, value_bytes);
        !bad.ok()) {
      return bad;
    }
  }
  const ChangeNotice notice{this};
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) map_[keys[i]] = values[i];
  return absl::OkStatus();
}

absl::Status HashStore::AppendAtMost(absl::string_view key,
                                     absl::string_view value,
                                     size_t max_value_bytes) {
  const ChangeNotice notice{this};
  absl::MutexLock lock(&mu_);
  auto it = map_.find(key);
  const size_t now = it == map_.end() ? 0 : it->second.size();
  if (value.size() > max_value_bytes || now > max_value_bytes - value.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("store: append of ", value.size(), " byte(s) to key \"",
                     key, "\" (holding ", now,
                     ") would pass the store's limit of ", max_value_bytes,
                     " byte(s) for a value (DISTKIT_STORE_MAX_REQUEST_BYTES)"));
  }
  if (it == map_.end()) it = map_.emplace(key, std::string()).first;
  it->second.append(value.data(), value.size());
  return absl::OkStatus();
}

absl::Status HashStore::Append(absl::string_view key, absl::string_view value) {
  if (limits_) {
    // Bounded as a set's value: an append may not grow one past it either.
    if (absl::Status bad = CheckStoreRequest("append", {key}, value.size());
        !bad.ok()) {
      return bad;
    }
    return AppendAtMost(key, value, MaxStoreRequestBytes());
  }
  const ChangeNotice notice{this};
  absl::MutexLock lock(&mu_);
  map_[key].append(value.data(), value.size());
  return absl::OkStatus();
}

}  // namespace distkit
