#include "cc/dist_api/object_collectives.h"

#include <algorithm>
#include <cstring>

#include "cc/core/device_staging.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"

namespace distkit {
namespace dist {
namespace {

ProcessGroup* Resolve(ProcessGroup* group) {
  return const_cast<ProcessGroup*>(ResolveGroup(group));
}

bool Trivial(ProcessGroup* group) {
  if (!IsDistributed()) return true;
  // A non-member's call is not a no-op: it goes on, and the group refuses it
  // (FAILED_PRECONDITION), as the header says for every collective.
  const ProcessGroup* g = Resolve(group);
  return g->is_member() && g->size() == 1;
}

// The objects' bytes are host memory; every transfer stages them through
// the group's comm device (comm_device.h), as mmengine moves pickled
// objects in a uint8 tensor on cuda:<current> for NCCL.
absl::Status AllGatherHost(ProcessGroup* g, TensorRef in, TensorRef out) {
  const Device comm = g->comm_device();
  return OnCommDevice(in, comm, Access::kRead, [&](const TensorRef& i) {
    return OnCommDevice(out, comm, Access::kWrite,
                        [&](const TensorRef& o) { return g->AllGather(i, o); });
  });
}

absl::Status GatherHost(ProcessGroup* g, TensorRef in, TensorRef out, int dst) {
  const Device comm = g->comm_device();
  return OnCommDevice(in, comm, Access::kRead, [&](const TensorRef& i) {
    return OnCommDevice(out, comm, Access::kWrite, [&](const TensorRef& o) {
      return g->Gather(i, o, dst);
    });
  });
}

absl::Status BroadcastHost(ProcessGroup* g, TensorRef data, int src) {
  return OnCommDevice(data, g->comm_device(), Access::kReadWrite,
                      [&](const TensorRef& d) { return g->Broadcast(d, src); });
}

// All ranks' sizes, in rank order.
absl::StatusOr<std::vector<int64_t>> ExchangeSizes(int64_t mine,
                                                   ProcessGroup* g) {
  std::vector<int64_t> sizes(g->size());
  DK_RETURN_IF_ERROR(
      AllGatherHost(g, TensorRef(&mine, 1, DataType::kInt64),
                    TensorRef(sizes.data(), g->size(), DataType::kInt64)));
  return sizes;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AllGatherObject(
    const std::string& data, ProcessGroup* group) {
  if (Trivial(group)) return std::vector<std::string>{data};
  ProcessGroup* g = Resolve(group);
  DK_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                      ExchangeSizes(data.size(), g));
  const int64_t max = *std::max_element(sizes.begin(), sizes.end());
  std::string padded = data;
  padded.resize(max);
  std::vector<char> all(max * g->size());
  DK_RETURN_IF_ERROR(
      AllGatherHost(g, TensorRef(padded.data(), max, DataType::kUInt8),
                    TensorRef(all.data(), all.size(), DataType::kUInt8)));
  std::vector<std::string> out;
  for (int r = 0; r < g->size(); ++r)
    out.emplace_back(all.data() + r * max, sizes[r]);
  return out;
}

absl::StatusOr<std::optional<std::vector<std::string>>> GatherObject(
    const std::string& data, int dst, ProcessGroup* group) {
  if (Trivial(group)) return std::optional<std::vector<std::string>>({data});
  ProcessGroup* g = Resolve(group);
  DK_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                      ExchangeSizes(data.size(), g));
  const int64_t max = *std::max_element(sizes.begin(), sizes.end());
  std::string padded = data;
  padded.resize(max);
  std::vector<char> all(g->rank() == dst ? max * g->size() : 0);
  DK_RETURN_IF_ERROR(
      GatherHost(g, TensorRef(padded.data(), max, DataType::kUInt8),
                 TensorRef(all.data(), all.size(), DataType::kUInt8), dst));
  if (g->rank() != dst) return std::optional<std::vector<std::string>>();
  std::vector<std::string> out;
  for (int r = 0; r < g->size(); ++r)
    out.emplace_back(all.data() + r * max, sizes[r]);
  return std::optional<std::vector<std::string>>(std::move(out));
}

absl::Status BroadcastObjectList(std::vector<std::string>* objects, int src,
                                 ProcessGroup* group) {
  if (objects == nullptr) return absl::InvalidArgumentError("objects is NULL");
  if (Trivial(group)) return absl::OkStatus();
  ProcessGroup* g = Resolve(group);
  // The count, then each object's size, then the concatenated bytes.
  int64_t count = g->rank() == src ? static_cast<int64_t>(objects->size()) : 0;
  DK_RETURN_IF_ERROR(
      BroadcastHost(g, TensorRef(&count, 1, DataType::kInt64), src));
  std::vector<int64_t> sizes(count);
  if (g->rank() == src) {
    for (int64_t i = 0; i < count; ++i) sizes[i] = (*objects)[i].size();
  }
  DK_RETURN_IF_ERROR(
      BroadcastHost(g, TensorRef(sizes.data(), count, DataType::kInt64), src));
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::string payload;
  if (g->rank() == src) {
    for (const std::string& o : *objects) payload += o;
  } else {
    payload.resize(total);
  }
  DK_RETURN_IF_ERROR(BroadcastHost(
      g, TensorRef(payload.data(), total, DataType::kUInt8), src));
  if (g->rank() != src) {
    objects->clear();
    int64_t offset = 0;
    for (int64_t s : sizes) {
      objects->push_back(payload.substr(offset, s));
      offset += s;
    }
  }
  return absl::OkStatus();
}

}  // namespace dist
}  // namespace distkit
