#include "cc/store/gather_once.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace distkit {
namespace {

std::vector<std::string> RankKeys(absl::string_view prefix, int size) {
  std::vector<std::string> keys;
  keys.reserve(size);
  for (int r = 0; r < size; ++r) keys.push_back(absl::StrCat(prefix, r));
  return keys;
}

// The wait for the combined value timed out: how many ranks arrived, and
// which keys are missing (a wait of no time on them names them).
absl::Status Late(Store& store, absl::string_view prefix,
                  absl::string_view what, int size, const absl::Status& waited,
                  absl::Duration timeout) {
  std::string arrived = "an unknown number";
  absl::StatusOr<int64_t> count = store.Add(absl::StrCat(prefix, "arrived"), 0);
  if (count.ok()) arrived = absl::StrCat(*count);
  absl::StatusOr<std::vector<std::string>> all =
      store.MultiGetWithTimeout(RankKeys(prefix, size), absl::ZeroDuration());
  std::string missing;
  if (all.ok()) {
    missing =
        "every rank's is there, but the last to arrive did not write "
        "the combined value";
  } else {
    constexpr absl::string_view kKeys = "waiting for key(s) ";
    const absl::string_view told = all.status().message();
    const size_t at = told.find(kKeys);
    missing =
        at == absl::string_view::npos
            ? absl::StrCat("which are missing is unknown (", told, ")")
            : absl::StrCat("missing key(s) ", told.substr(at + kKeys.size()));
  }
  return absl::Status(
      waited.code(),
      absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                   " waiting for every rank's ", what, ": ", arrived, " of ",
                   size, " ranks had arrived; ", missing));
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
  // Every rank's key is set before it counts itself in, so the rank that
  // brings the count to `size` finds them all.
  absl::StatusOr<int64_t> arrived =
      store.Add(absl::StrCat(prefix, "arrived"), 1);
  if (!arrived.ok()) return arrived.status();
  if (*arrived == size) {
    absl::StatusOr<std::vector<std::string>> values =
        store.MultiGetWithTimeout(RankKeys(prefix, size), timeout);
    if (!values.ok()) return values.status();
    std::string result = combine(*values);
    set = store.Set(combined_key, result);
    if (!set.ok()) return set;
    return result;
  }
  absl::StatusOr<std::string> result = store.Get(combined_key, timeout);
  if (absl::IsDeadlineExceeded(result.status())) {
    return Late(store, prefix, what, size, result.status(), timeout);
  }
  return result;
}

}  // namespace distkit
