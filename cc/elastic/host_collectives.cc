#include "cc/elastic/host_collectives.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/device_staging.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"

namespace distkit {
namespace elastic {

namespace {

std::atomic<int64_t> allocation_limit{-1};

}  // namespace

void SetHostAllocationLimitForTesting(int64_t bytes) {
  allocation_limit = bytes;
}

absl::StatusOr<HostBuffer> AllocateHost(int64_t bytes, const char* what) {
  void* p = nullptr;
  const int64_t limit = allocation_limit.load(std::memory_order_relaxed);
  if ((limit >= 0 && bytes > limit) ||
      posix_memalign(&p, kHostAlign,
                     static_cast<size_t>(std::max<int64_t>(bytes, 1))) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": cannot allocate ", bytes, " bytes"));
  }
  return HostBuffer(static_cast<char*>(p));
}

absl::Status AgreeReady(ProcessGroup& group, const absl::Status& mine,
                        absl::string_view what) {
  int64_t code = static_cast<int64_t>(mine.code());
  std::vector<int64_t> codes(static_cast<size_t>(group.size()));
  const absl::Status gathered =
      AllGatherHost(group, &code, codes.data(), 1, DataType::kInt64);
  if (!mine.ok()) return mine;  // this member's own cause first
  DK_RETURN_IF_ERROR(gathered);
  std::vector<int> failed;
  for (int r = 0; r < group.size(); ++r) {
    if (codes[r] != 0) failed.push_back(r);
  }
  if (failed.empty()) return absl::OkStatus();
  const auto first = static_cast<absl::StatusCode>(codes[failed[0]]);
  return absl::Status(
      first, absl::StrCat(what, " on group '", group.name(), "': member(s) ",
                          absl::StrJoin(failed, ", "), " failed there (",
                          absl::StatusCodeToString(first),
                          ") before the exchange; nothing was exchanged"));
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
