// How a scripted multi-rank program reports, in every folder. (Programs that
// are a list of independent cases use gtest instead, with rank_env's
// JoinJob.) A failed Check prints "rank R: CHECK FAILED: what" on stderr and
// is counted, so one run shows every failure; Require stops the rank at once
// where later steps depend on the result; FinishChecks prints one summary
// line and gives the exit status. The harness prefixes each line with the
// rank that wrote it too, and fails the test on any nonzero status.

#ifndef DISTKIT_TESTING_CC_RANK_CHECK_H_
#define DISTKIT_TESTING_CC_RANK_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace distkit {
namespace testing {

// The rank named in messages (-1 until set).
void SetCheckRank(int rank);

void Check(bool ok, absl::string_view what);
// Check(status.ok()) naming the status.
void CheckOk(const absl::Status& status, absl::string_view what);

// Like Check, but exits with status 1 at once when it fails.
void Require(bool ok, absl::string_view what);
void RequireOk(const absl::Status& status, absl::string_view what);

int CheckFailures();

// Prints "rank R: <summary>: passed" or "... N checks FAILED"; returns the
// exit status (0 when nothing failed).
int FinishChecks(absl::string_view summary);

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_RANK_CHECK_H_
