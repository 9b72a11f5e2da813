#include "cc/store/gather_once.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cc/store/call_deadline.h"

namespace distkit {
namespace {

// What the naming of missing keys may take after a wait timed out.
constexpr absl::Duration kNamingBudget = absl::Milliseconds(500);

std::vector<std::string> RankKeys(absl::string_view prefix, int size) {
  std::vector<std::string> keys;
  keys.reserve(size);
  for (int r = 0; r < size; ++r) keys.push_back(absl::StrCat(prefix, r));
  return keys;
}

// A wait that timed out after `waited`: which ranks' keys are missing (a
// wait of no time on them names them). `combiner`: rank 0's own wait for
// every key, not another rank's wait for rank 0's combined value.
absl::Status Late(Store& store, absl::string_view prefix,
                  absl::string_view what, int size, bool combiner,
                  const absl::Status& status, absl::Duration waited) {
  std::string missing;
  {
    ScopedStoreDeadline budget(absl::Now() + kNamingBudget);
    absl::StatusOr<std::vector<std::string>> all =
        store.MultiGetWithTimeout(RankKeys(prefix, size), absl::ZeroDuration());
    constexpr absl::string_view kKeys = "waiting for key(s) ";
    const absl::string_view told = all.status().message();
    const size_t at = told.find(kKeys);
    if (all.ok()) {
      missing = combiner ? "every rank's is there now, but came too late"
                         : "every rank's is there, but rank 0 had not "
                           "published them";
    } else if (at != absl::string_view::npos) {
      missing = absl::StrCat("missing key(s) ", told.substr(at + kKeys.size()));
    } else {
      missing = absl::StrCat("which are missing is unknown (", told, ")");
    }
  }
  return absl::Status(
      status.code(),
      absl::StrCat("timed out after ", absl::FormatDuration(waited),
                   " waiting for every rank's ", what, ": ", missing, " (",
                   status.message(), ")"));
}

// The combined key's value: kCombined and the result, or kFailed and rank
// 0's error, so that a failure of rank 0's ends the others' waits at once.
constexpr char kCombined = '+';
constexpr char kFailed = '-';

// Rank 0's error, published for the others (best effort: a store that
// refused the gather may refuse this too, and they then time out).
absl::Status Publish(Store& store, const std::string& combined_key,
                     absl::Status error) {
  (void)store.Set(combined_key, absl::StrCat(std::string(1, kFailed),
                                             static_cast<int>(error.code()),
                                             ":", error.message()));
  return error;
}

}  // namespace

absl::StatusOr<std::string> GatherOnce(
    Store& store, absl::string_view prefix, absl::string_view what, int rank,
    int size, absl::string_view mine,
    absl::FunctionRef<std::string(const std::vector<std::string>&)> combine,
    absl::Duration timeout) {
  const std::string combined_key = absl::StrCat(prefix, "all");
  absl::Status set = store.Set(absl::StrCat(prefix, rank), mine);
  if (!set.ok()) return set;
  const absl::Time start = absl::Now();
  if (rank == 0) {
    absl::StatusOr<std::vector<std::string>> values =
        store.MultiGetWithTimeout(RankKeys(prefix, size), timeout);
    if (absl::IsDeadlineExceeded(values.status())) {
      return Publish(store, combined_key,
                     Late(store, prefix, what, size, /*combiner=*/true,
                          values.status(), absl::Now() - start));
    }
    if (!values.ok()) return Publish(store, combined_key, values.status());
    std::string result = combine(*values);
    set = store.Set(combined_key,
                    absl::StrCat(std::string(1, kCombined), result));
    if (!set.ok()) return Publish(store, combined_key, set);
    return result;
  }
  absl::StatusOr<std::string> value = store.Get(combined_key, timeout);
  if (absl::IsDeadlineExceeded(value.status())) {
    return Late(store, prefix, what, size, /*combiner=*/false, value.status(),
                absl::Now() - start);
  }
  if (!value.ok()) return value.status();
  if (!value->empty() && (*value)[0] == kCombined) return value->substr(1);
  // Rank 0's error: its code's number, ':', its message.
  int code = static_cast<int>(absl::StatusCode::kUnknown);
  const size_t colon = value->find(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(*value).substr(1, colon - 1),
                        &code)) {
    return absl::InternalError(absl::StrCat("rank 0's answer for every rank's ",
                                            what, " is unreadable: ", *value));
  }
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat("rank 0 could not gather every rank's ",
                                   what, ": ", value->substr(colon + 1)));
}

}  // namespace distkit
