// The frame of a LibTorch multi-rank test program (cc/torch): join the
// launcher's job, checks naming this rank, one intra-op thread (the ranks
// share the machine's cores); a scratch directory every rank sees; at the
// end every rank's checks done before any rank leaves.

#ifndef DISTKIT_CC_TORCH_TORCH_JOB_TEST_UTIL_H_
#define DISTKIT_CC_TORCH_TORCH_JOB_TEST_UTIL_H_

#include <torch/utils.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cc/dist_api/dist.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace testing {

struct TorchJob {
  int rank = 0;
  int world = 1;
};

// init_dist("pytorch"); stops the rank when it fails.
inline TorchJob JoinTorchJob() {
  RequireOk(dist::InitDist("pytorch"), "init");
  TorchJob job;
  job.rank = dist::GetRank();
  job.world = dist::GetWorldSize();
  SetCheckRank(job.rank);
  torch::set_num_threads(1);
  return job;
}

// $TEST_TMPDIR/<name> (or /tmp/<name>), made by rank 0 before any rank
// returns (collective).
inline std::string SharedScratchDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  if (dist::GetRank() == 0) {
    Require(std::system(("mkdir -p " + dir).c_str()) == 0, "mkdir " + dir);
  }
  RequireOk(dist::Barrier(), "barrier");
  return dir;
}

// Waits for every rank, prints the checks' summary, leaves the job; returns
// the exit status (FinishChecks).
inline int LeaveTorchJob(absl::string_view summary) {
  RequireOk(dist::Barrier(), "barrier");
  const int status = FinishChecks(summary);
  dist::DestroyDist();
  return status;
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_TORCH_JOB_TEST_UTIL_H_
