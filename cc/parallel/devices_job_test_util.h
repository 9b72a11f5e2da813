// The frame of the engines' device test programs (GradReducer's and
// FlatShard's *_devices tests, the reducer's registration test): join the
// job on the backend argument (testing/cc/devices_job.h), run the program's
// checks, and let no rank leave before every rank's checks are done.

#ifndef DISTKIT_CC_PARALLEL_DEVICES_JOB_TEST_UTIL_H_
#define DISTKIT_CC_PARALLEL_DEVICES_JOB_TEST_UTIL_H_

#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cc/dist_api/dist.h"
#include "testing/cc/devices_job.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace testing {

// The program's exit status: 2 for a wrong argument or a failed join (the
// reason printed), else FinishChecks' for "<what> (<backend>)".
inline int RunDevicesJob(int argc, char** argv, absl::string_view what,
                         const std::function<void(const DevicesJob&)>& checks) {
  std::optional<DevicesJob> job = JoinDevicesJob(argc, argv);
  if (!job) return 2;
  checks(*job);
  RequireOk(dist::Barrier(), "barrier");
  dist::DestroyDist();
  return FinishChecks(absl::StrCat(what, " (", job->backend, ")"));
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_CC_PARALLEL_DEVICES_JOB_TEST_UTIL_H_
