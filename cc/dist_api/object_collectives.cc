#include "cc/dist_api/object_collectives.h"

#include <algorithm>
#include <cstring>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/device_copy.h"
#include "cc/core/device_staging.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/internal/group_argument.h"

namespace distkit {
namespace dist {
namespace {

using internal::Resolve;
using internal::Trivial;

// The objects' bytes are host memory; every transfer stages them through
// the group's comm device (ProcessGroup::comm_device()), as mmengine moves
// pickled objects in a uint8 tensor on cuda:<current> for NCCL.
absl::Status AllGatherHost(ProcessGroup* g, TensorRef in, TensorRef out) {
  return InOutOnCommDevice(in, out, g->comm_device(),
                           [&](const TensorRef& i, const TensorRef& o) {
                             return g->AllGather(i, o);
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

// An object payload's host buffers on the group's comm device. Where that
// is not the host, the staging is allocated on every rank first and the
// ranks agree that it exists: a payload too large for one rank's device
// fails every rank at once, naming it, instead of leaving the others waiting
// inside the collective until the timeout.
class PayloadStaging {
 public:
  // `in` is read; `out` (nullptr: `in`, in place) receives the result.
  static absl::StatusOr<PayloadStaging> Make(ProcessGroup* g, const char* op,
                                             void* in, size_t in_bytes,
                                             void* out, size_t out_bytes) {
    PayloadStaging s;
    s.comm_ = g->comm_device();
    s.host_out_ = out != nullptr ? out : in;
    s.out_bytes_ = out != nullptr ? out_bytes : in_bytes;
    if (s.comm_.is_cpu()) {
      s.in_ = TensorRef(in, in_bytes, DataType::kUInt8);
      s.out_ = TensorRef(s.host_out_, s.out_bytes_, DataType::kUInt8);
      return s;
    }
    absl::StatusOr<DeviceBuffer> a = DeviceBuffer::Allocate(s.comm_, in_bytes);
    absl::StatusOr<DeviceBuffer> b =
        a.ok() && out != nullptr ? DeviceBuffer::Allocate(s.comm_, out_bytes)
                                 : absl::StatusOr<DeviceBuffer>(DeviceBuffer());
    const absl::Status mine = !a.ok() ? a.status() : b.status();
    DK_ASSIGN_OR_RETURN(std::vector<int64_t> failed,
                        ExchangeSizes(mine.ok() ? 0 : 1, g));
    std::vector<std::string> who;
    for (int r = 0; r < g->size(); ++r) {
      if (failed[r] != 0) who.push_back(absl::StrCat(r));
    }
    if (!who.empty()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          op, " on group '", g->name(),
          "': the objects do not fit on the comm device ", s.comm_.ToString(),
          " of rank(s) ", absl::StrJoin(who, ", "),
          mine.ok() ? "" : absl::StrCat(" (here: ", mine.message(), ")")));
    }
    s.in_buffer_ = *std::move(a);
    s.in_ = TensorRef(s.in_buffer_.data(), in_bytes, DataType::kUInt8, s.comm_);
    if (out != nullptr) {
      s.out_buffer_ = *std::move(b);
      s.out_ =
          TensorRef(s.out_buffer_.data(), out_bytes, DataType::kUInt8, s.comm_);
    } else {
      s.out_ = s.in_;
    }
    DK_RETURN_IF_ERROR(
        CopyBytes(s.in_.data(), s.comm_, in, Device::Cpu(), in_bytes));
    return s;
  }
  const TensorRef& in() const { return in_; }
  const TensorRef& out() const { return out_; }
  // The result back into the host buffer.
  absl::Status Finish() const {
    if (comm_.is_cpu()) return absl::OkStatus();
    return CopyBytes(host_out_, Device::Cpu(), out_.data(), comm_, out_bytes_);
  }

 private:
  Device comm_;
  void* host_out_ = nullptr;
  size_t out_bytes_ = 0;
  DeviceBuffer in_buffer_, out_buffer_;
  TensorRef in_, out_;
};

}  // namespace

namespace {

// all_gather_object and gather_object alike: every rank's bytes, padded to
// the longest, collected by `collect` (an all_gather, or a gather to one
// rank); the objects are split back out where this rank `receives`.
absl::StatusOr<std::vector<std::string>> CollectPadded(
    const std::string& data, ProcessGroup* g, const char* op, bool receives,
    absl::FunctionRef<absl::Status(TensorRef in, TensorRef out)> collect) {
  DK_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                      ExchangeSizes(data.size(), g));
  const int64_t max = *std::max_element(sizes.begin(), sizes.end());
  std::string padded = data;
  padded.resize(max);
  std::vector<char> all(receives ? max * g->size() : 0);
  DK_ASSIGN_OR_RETURN(
      PayloadStaging staged,
      PayloadStaging::Make(g, op, padded.data(), max, all.data(), all.size()));
  DK_RETURN_IF_ERROR(collect(staged.in(), staged.out()));
  DK_RETURN_IF_ERROR(staged.Finish());
  std::vector<std::string> out;
  if (!receives) return out;
  for (int r = 0; r < g->size(); ++r) {
    out.emplace_back(all.data() + r * max, sizes[r]);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> AllGatherObject(
    const std::string& data, ProcessGroup* group) {
  const std::shared_ptr<ProcessGroup> held = Resolve(group);
  if (Trivial(held)) return std::vector<std::string>{data};
  ProcessGroup* g = held.get();
  return CollectPadded(
      data, g, "all_gather_object", /*receives=*/true,
      [g](TensorRef in, TensorRef out) { return g->AllGather(in, out); });
}

absl::StatusOr<std::optional<std::vector<std::string>>> GatherObject(
    const std::string& data, int dst, ProcessGroup* group) {
  const std::shared_ptr<ProcessGroup> held = Resolve(group);
  if (Trivial(held)) return std::optional<std::vector<std::string>>({data});
  ProcessGroup* g = held.get();
  DK_ASSIGN_OR_RETURN(std::vector<std::string> out,
                      CollectPadded(data, g, "gather_object", g->rank() == dst,
                                    [g, dst](TensorRef in, TensorRef out) {
                                      return g->Gather(in, out, dst);
                                    }));
  if (g->rank() != dst) return std::optional<std::vector<std::string>>();
  return std::optional<std::vector<std::string>>(std::move(out));
}

absl::Status BroadcastObjectList(std::vector<std::string>* objects, int src,
                                 ProcessGroup* group) {
  if (objects == nullptr) return absl::InvalidArgumentError("objects is NULL");
  const std::shared_ptr<ProcessGroup> held = Resolve(group);
  if (Trivial(held)) return absl::OkStatus();
  ProcessGroup* g = held.get();
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
  DK_ASSIGN_OR_RETURN(PayloadStaging staged,
                      PayloadStaging::Make(g, "broadcast_object_list",
                                           payload.data(), total, nullptr, 0));
  DK_RETURN_IF_ERROR(g->Broadcast(staged.in(), src));
  DK_RETURN_IF_ERROR(staged.Finish());
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
