// A job's failure, told through its store. Whoever sees a rank die while the
// others may still wait for it (today distrun, which sees its children exit)
// records what happened under kJobFailedKey. While it is there StoreServer
// answers every wait and multi_get whose keys are missing with
// JobFailedError, at once: every rank blocked in start-up (rendezvous,
// address exchange, the shared-memory segment's attach) ends within
// milliseconds with the reason, instead of at its timeout. Calls whose keys
// are present, and polls (try_only), are answered as before. A launcher that
// will record failures says so first under kFailureRecorderKey, so that a
// rank whose peer failed waits a moment for the record only where one will
// come.

#ifndef DISTKIT_CC_STORE_JOB_FAILURE_H_
#define DISTKIT_CC_STORE_JOB_FAILURE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cc/store/store.h"

namespace distkit {

// At the store's root (ranks' keys are under a PrefixStore).
inline constexpr char kJobFailedKey[] = "distkit/job_failed";
// Set (to the launcher's name) by a launcher that records failures.
inline constexpr char kFailureRecorderKey[] = "distkit/failure_recorder";

// Records `what` ("rank 2 (pid 41) was killed by signal 9 (Killed), seen by
// distrun on node 0") unless a failure is recorded already: the first
// report names the cause, later ones are its consequences.
absl::Status ReportJobFailure(Store& store, absl::string_view what);

// The error of a blocked call for `keys` after the job failed with `what`.
absl::Status JobFailedError(absl::string_view what,
                            absl::Span<const std::string> keys);

// The failure recorded at the root of `store`, if any, now (one check, and
// one get when there is one; bounded).
std::optional<std::string> JobFailureNow(Store& store);

// Whether a launcher said it records failures (kFailureRecorderKey at the
// root of `store`; one bounded check).
bool FailuresAreRecorded(Store& store);

// `status` (an error of start-up: a peer's connection refused or closed, a
// wait cut short) with the job's recorded failure added, so that it names
// the rank that died and how. Waits up to `wait` for the record (the
// launcher sees a death a moment after the dead rank's sockets close), at
// the root of `store` (under its PrefixStores). Unchanged when nothing is
// recorded, when the status says it already, or for errors no peer causes.
absl::Status WithJobFailure(Store& store, absl::Status status,
                            absl::Duration wait);

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_JOB_FAILURE_H_
