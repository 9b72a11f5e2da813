// The first steps of the engines' device tests (GradReducer's and
// FlatShard's *_devices tests): the backend argument ("gloo", "ext_test" or
// "nccl"), the extension device installed, the job joined, checks naming
// this rank, and the device that is not the host the engine's parameters
// live on.

#ifndef DISTKIT_TESTING_CC_DEVICES_JOB_H_
#define DISTKIT_TESTING_CC_DEVICES_JOB_H_

#include <memory>
#include <optional>
#include <string>

#include "cc/core/device.h"
#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"
#include "testing/cc/dist_job.h"
#include "testing/cc/extension_device.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace testing {

struct DevicesJob {
  std::string backend;
  int rank = 0;
  int size = 1;
  std::shared_ptr<ProcessGroup> world;
  // ext:0, or over nccl the group's comm device (a CUDA device, real or
  // simulated).
  Device device = Device::Ext(0);
};

// nullopt (the reason printed) for a wrong argument or a failed join.
inline std::optional<DevicesJob> JoinDevicesJob(int argc, char** argv) {
  std::optional<std::string> backend =
      BackendArgument(argc, argv, {"gloo", "ext_test", "nccl"});
  if (!backend) return std::nullopt;
  InstallXorExtensionDevice();
  if (!JoinDistJob(*backend)) return std::nullopt;
  DevicesJob job;
  job.backend = *backend;
  job.rank = dist::GetRank();
  job.size = dist::GetWorldSize();
  SetCheckRank(job.rank);
  job.world = dist::GetDefaultGroup();
  if (job.backend == "nccl") job.device = job.world->comm_device();
  return job;
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_DEVICES_JOB_H_
