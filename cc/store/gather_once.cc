#include "cc/store/gather_once.h"

#include "absl/status/status.h"
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

// The wait for rank 0's combined value timed out after `waited`: which
// ranks' keys are missing (a wait of no time on them names them).
absl::Status Late(Store& store, absl::string_view prefix,
                  absl::string_view what, int size, const absl::Status& status,
                  absl::Duration waited) {
  std::string missing;
  {
    ScopedStoreDeadline budget(absl::Now() + kNamingBudget);
    absl::StatusOr<std::vector<std::string>> all =
        store.MultiGetWithTimeout(RankKeys(prefix, size), absl::ZeroDuration());
    constexpr absl::string_view kKeys = "waiting for key(s) ";
    const absl::string_view told = all.status().message();
    const size_t at = told.find(kKeys);
    if (all.ok()) {
      missing = "every rank's is there, but rank 0 had not published them";
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

}  // namespace

absl::StatusOr<std::string> GatherOnce(
    Store& store, absl::string_view prefix, absl::string_view what, int rank,
    int size, absl::string_view mine,
    absl::FunctionRef<std::string(const std::vector<std::string>&)> combine,
    absl::Duration timeout) {
  const std::string combined_key = absl::StrCat(prefix, "all");
  absl::Status set = store.Set(absl::StrCat(prefix, rank), mine);
  if (!set.ok()) return set;
  if (rank == 0) {
    absl::StatusOr<std::vector<std::string>> values =
        store.MultiGetWithTimeout(RankKeys(prefix, size), timeout);
    if (!values.ok()) return values.status();
    std::string result = combine(*values);
    set = store.Set(combined_key, result);
    if (!set.ok()) return set;
    return result;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> result = store.Get(combined_key, timeout);
  if (absl::IsDeadlineExceeded(result.status())) {
    return Late(store, prefix, what, size, result.status(),
                absl::Now() - start);
  }
  return result;
}

}  // namespace distkit
