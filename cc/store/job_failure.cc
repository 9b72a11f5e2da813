#include "cc/store/job_failure.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/store/call_deadline.h"
#include "cc/store/prefix_store.h"

namespace distkit {

absl::Status ReportJobFailure(Store& store, absl::string_view what) {
  return store.CompareSet(kJobFailedKey, "", what).status();
}

absl::Status JobFailedError(absl::string_view what,
                            absl::Span<const std::string> keys) {
  constexpr size_t kNamed = 3;
  std::string named =
      absl::StrJoin(keys.subspan(0, std::min(keys.size(), kNamed)), ", ");
  if (keys.size() > kNamed) absl::StrAppend(&named, ", ...");
  return absl::AbortedError(absl::StrCat("the job failed: ", what,
                                         " (while waiting for ", named, ")"));
}

namespace {

Store& RootOf(Store& store) {
  Store* root = &store;
  while (auto* p = dynamic_cast<PrefixStore*>(root)) root = p->base().get();
  return *root;
}

}  // namespace

std::optional<std::string> JobFailureNow(Store& store) {
  Store& root = RootOf(store);
  ScopedStoreDeadline bounded(absl::Now() + absl::Milliseconds(200));
  absl::StatusOr<bool> there = root.Check({std::string(kJobFailedKey)});
  if (!there.ok() || !*there) return std::nullopt;
  absl::StatusOr<std::string> what =
      root.Get(kJobFailedKey, absl::Milliseconds(200));
  if (!what.ok()) return std::nullopt;
  return *what;
}

bool FailuresAreRecorded(Store& store) {
  ScopedStoreDeadline bounded(absl::Now() + absl::Milliseconds(200));
  absl::StatusOr<bool> there =
      RootOf(store).Check({std::string(kFailureRecorderKey)});
  return there.ok() && *there;
}

absl::Status WithJobFailure(Store& store, absl::Status status,
                            absl::Duration wait) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      break;
    default:
      return status;  // kAborted: the store's own JobFailedError already
  }
  if (absl::StrContains(status.message(), "the job failed: ")) return status;
  std::optional<std::string> what;
  if (wait <= absl::ZeroDuration()) {
    what = JobFailureNow(store);  // only what is there already
  } else {
    ScopedStoreDeadline bounded(absl::Now() + wait);
    absl::StatusOr<std::string> got = RootOf(store).Get(kJobFailedKey, wait);
    if (got.ok()) what = *std::move(got);
  }
  if (!what.has_value()) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(),
                                                  "; the job failed: ", *what));
}

}  // namespace distkit
