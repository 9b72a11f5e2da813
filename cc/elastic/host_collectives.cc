#include "cc/elastic/host_collectives.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cc/core/device_staging.h"
#include "cc/core/tensor_ref.h"

namespace distkit {
namespace elastic {

absl::StatusOr<HostBuffer> AllocateHost(int64_t bytes, const char* what) {
  void* p = nullptr;
  if (posix_memalign(&p, kHostAlign,
                     static_cast<size_t>(std::max<int64_t>(bytes, 1))) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": cannot allocate ", bytes, " bytes"));
  }
  return HostBuffer(static_cast<char*>(p));
}

absl::Status AllGatherHost(ProcessGroup& group, void* in, void* out,
                           int64_t count, DataType dtype) {
  return InOutOnCommDevice(
      TensorRef(in, count, dtype), TensorRef(out, count * group.size(), dtype),
      group.comm_device(), [&](const TensorRef& i, const TensorRef& o) {
        return group.AllGather(i, o);
      });
}

absl::Status BroadcastHost(ProcessGroup& group, void* data, int64_t bytes,
                           int root) {
  return OnCommDevice(
      TensorRef(data, bytes, DataType::kUInt8), group.comm_device(),
      Access::kReadWrite,
      [&](const TensorRef& t) { return group.Broadcast(t, root); });
}

absl::Status AllToAllHost(ProcessGroup& group, void* in, void* out,
                          std::vector<int64_t> input_splits,
                          std::vector<int64_t> output_splits) {
  const int64_t sent =
      std::accumulate(input_splits.begin(), input_splits.end(), int64_t{0});
  const int64_t received =
      std::accumulate(output_splits.begin(), output_splits.end(), int64_t{0});
  return InOutOnCommDevice(
      TensorRef(in, sent, DataType::kUInt8),
      TensorRef(out, received, DataType::kUInt8), group.comm_device(),
      [&](const TensorRef& i, const TensorRef& o) {
        return group.AllToAll(i, o, std::move(input_splits),
                              std::move(output_splits));
      });
}

}  // namespace elastic
}  // namespace distkit
