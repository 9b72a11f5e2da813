// mmengine's casting rule as one helper, shared by the tensor and object
// collectives and the gradient reducer: data that is not on a group's
// communication device is staged there, the collective runs on the staged
// copy, and what it wrote is copied back. So host buffers (object bytes, a
// seed, a flag vector) reach NCCL on the GPU, and CUDA tensors reach Gloo
// through the host, as in mmengine. (Host arithmetic on device memory, the
// other direction, is host_staging.h.)

#ifndef DISTKIT_CC_CORE_DEVICE_STAGING_H_
#define DISTKIT_CC_CORE_DEVICE_STAGING_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// What the collective does with a buffer: which copies staging needs.
enum class Access { kRead, kWrite, kReadWrite };

// Runs `run(view)` with `data` on `comm`, staged when it lives elsewhere.
template <typename F>
absl::Status OnCommDevice(const TensorRef& data, Device comm, Access access,
                          F&& run) {
  if (data.device() == comm) return run(data);
  DK_ASSIGN_OR_RETURN(DeviceBuffer staging,
                      DeviceBuffer::Allocate(comm, data.nbytes()));
  if (access != Access::kWrite) {
    DK_RETURN_IF_ERROR(CopyBytes(staging.data(), comm, data.data(),
                                 data.device(), data.nbytes()));
  }
  DK_RETURN_IF_ERROR(run(data.At(staging.data(), comm)));
  if (access == Access::kRead) return absl::OkStatus();
  return CopyBytes(data.data(), data.device(), staging.data(), comm,
                   data.nbytes());
}

// The same for a collective that reads `in` and writes `out` (all_gather,
// gather): run(staged in, staged out).
template <typename F>
absl::Status InOutOnCommDevice(const TensorRef& in, const TensorRef& out,
                               Device comm, F&& run) {
  return OnCommDevice(in, comm, Access::kRead, [&](const TensorRef& i) {
    return OnCommDevice(out, comm, Access::kWrite,
                        [&](const TensorRef& o) { return run(i, o); });
  });
}

// The same for outputs the collective only writes, one per rank.
template <typename F>
absl::Status OutputsOnCommDevice(const std::vector<TensorRef>& outputs,
                                 Device comm, F&& run) {
  std::vector<DeviceBuffer> staging(outputs.size());
  std::vector<TensorRef> on_comm = outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].device() == comm) continue;
    DK_ASSIGN_OR_RETURN(staging[i],
                        DeviceBuffer::Allocate(comm, outputs[i].nbytes()));
    on_comm[i] = outputs[i].At(staging[i].data(), comm);
  }
  DK_RETURN_IF_ERROR(run(on_comm));
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].device() == comm) continue;
    DK_RETURN_IF_ERROR(CopyBytes(outputs[i].data(), outputs[i].device(),
                                 on_comm[i].data(), comm, outputs[i].nbytes()));
  }
  return absl::OkStatus();
}

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_DEVICE_STAGING_H_
