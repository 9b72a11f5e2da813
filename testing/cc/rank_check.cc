#include "testing/cc/rank_check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace distkit {
namespace testing {
namespace {

int rank = -1;
int failures = 0;

void Report(absl::string_view what) {
  ++failures;
  std::fprintf(stderr, "rank %d: CHECK FAILED: %s\n", rank,
               std::string(what).c_str());
  std::fflush(stderr);
}

}  // namespace

void SetCheckRank(int r) { rank = r; }

void Check(bool ok, absl::string_view what) {
  if (!ok) Report(what);
}

void CheckOk(const absl::Status& status, absl::string_view what) {
  if (!status.ok()) Report(absl::StrCat(what, ": ", status.ToString()));
}

void Require(bool ok, absl::string_view what) {
  if (ok) return;
  Report(what);
  std::exit(1);
}

void RequireOk(const absl::Status& status, absl::string_view what) {
  if (status.ok()) return;
  Report(absl::StrCat(what, ": ", status.ToString()));
  std::exit(1);
}

int CheckFailures() { return failures; }

int FinishChecks(absl::string_view summary) {
  if (failures == 0) {
    std::printf("rank %d: %s: passed\n", rank, std::string(summary).c_str());
  } else {
    std::printf("rank %d: %s: %d checks FAILED\n", rank,
                std::string(summary).c_str(), failures);
  }
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

}  // namespace testing
}  // namespace distkit
