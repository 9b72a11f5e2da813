#include "cc/dist_api/collectives.h"

#include <random>

#include "absl/strings/str_cat.h"
#include "cc/core/device_copy.h"
#include "cc/core/device_staging.h"
#include "cc/core/reduce_op.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/internal/group_argument.h"

namespace distkit {
namespace dist {
namespace {

using internal::Resolve;
using internal::Trivial;

absl::Status CopyInto(const TensorRef& from, const TensorRef& to) {
  if (from.data() == to.data()) return absl::OkStatus();
  return CopyBytes(to.data(), to.device(), from.data(), from.device(),
                   from.nbytes());
}

// One all_reduce over the concatenation of `tensors` (same dtype), staged on
// the comm device whatever device each tensor is on.
absl::Status FlatAllReduce(const std::vector<TensorRef>& tensors, ReduceOp op,
                           ProcessGroup* group) {
  if (tensors.empty()) return absl::OkStatus();
  const Device comm = group->comm_device();
  size_t bytes = 0;
  int64_t numel = 0;
  for (const TensorRef& t : tensors) {
    bytes += t.nbytes();
    numel += t.numel();
  }
  DK_ASSIGN_OR_RETURN(DeviceBuffer flat, DeviceBuffer::Allocate(comm, bytes));
  char* base = static_cast<char*>(flat.data());
  size_t offset = 0;
  for (const TensorRef& t : tensors) {
    DK_RETURN_IF_ERROR(
        CopyBytes(base + offset, comm, t.data(), t.device(), t.nbytes()));
    offset += t.nbytes();
  }
  DK_RETURN_IF_ERROR(group->AllReduce(
      TensorRef(flat.data(), numel, tensors[0].dtype(), comm), op));
  offset = 0;
  for (const TensorRef& t : tensors) {
    DK_RETURN_IF_ERROR(
        CopyBytes(t.data(), t.device(), base + offset, comm, t.nbytes()));
    offset += t.nbytes();
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AllReduce(TensorRef data, absl::string_view op,
                       ProcessGroup* group) {
  DK_ASSIGN_OR_RETURN(ReduceOp reduce_op, ParseReduceOp(op));
  const std::shared_ptr<ProcessGroup> g = Resolve(group);
  if (Trivial(g)) return absl::OkStatus();
  return OnCommDevice(
      data, g->comm_device(), Access::kReadWrite,
      [&](const TensorRef& t) { return g->AllReduce(t, reduce_op); });
}

absl::Status AllGather(TensorRef data, const std::vector<TensorRef>& outputs,
                       ProcessGroup* group) {
  const std::shared_ptr<ProcessGroup> g = Resolve(group);
  if (Trivial(g)) {
    if (outputs.size() != 1) {
      return absl::InvalidArgumentError(
          "all_gather: expected 1 output at world size 1");
    }
    return CopyInto(data, outputs[0]);
  }
  const Device comm = g->comm_device();
  return OnCommDevice(data, comm, Access::kRead, [&](const TensorRef& in) {
    return OutputsOnCommDevice(outputs, comm,
                               [&](const std::vector<TensorRef>& outs) {
                                 return g->AllGather(in, outs);
                               });
  });
}

absl::Status Gather(TensorRef data, const std::vector<TensorRef>& outputs,
                    int dst, ProcessGroup* group) {
  const std::shared_ptr<ProcessGroup> g = Resolve(group);
  if (Trivial(g)) {
    if (!outputs.empty()) return CopyInto(data, outputs[0]);
    return absl::OkStatus();
  }
  const Device comm = g->comm_device();
  const bool receives = g->rank() == dst;
  if (receives && static_cast<int>(outputs.size()) != g->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather: dst needs ", g->size(), " outputs, got ", outputs.size()));
  }
  // Gathered into one buffer on the comm device at dst, then copied out.
  DeviceBuffer staging;
  TensorRef flat;
  if (receives) {
    DK_ASSIGN_OR_RETURN(
        staging, DeviceBuffer::Allocate(comm, data.nbytes() * g->size()));
    flat =
        TensorRef(staging.data(), data.numel() * g->size(), data.dtype(), comm);
  }
  DK_RETURN_IF_ERROR(OnCommDevice(
      data, comm, Access::kRead,
      [&](const TensorRef& in) { return g->Gather(in, flat, dst); }));
  if (!receives) return absl::OkStatus();
  const char* all = static_cast<const char*>(staging.data());
  for (int r = 0; r < g->size(); ++r) {
    if (outputs[r].numel() != data.numel() ||
        outputs[r].dtype() != data.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gather: output ", r, " does not match the input's size or dtype"));
    }
    DK_RETURN_IF_ERROR(CopyBytes(outputs[r].data(), outputs[r].device(),
                                 all + r * data.nbytes(), comm, data.nbytes()));
  }
  return absl::OkStatus();
}

absl::Status Broadcast(TensorRef data, int src, ProcessGroup* group) {
  const std::shared_ptr<ProcessGroup> g = Resolve(group);
  if (Trivial(g)) return absl::OkStatus();
  return OnCommDevice(data, g->comm_device(), Access::kReadWrite,
                      [&](const TensorRef& t) { return g->Broadcast(t, src); });
}

absl::StatusOr<int32_t> SyncRandomSeed(ProcessGroup* group) {
  std::random_device device;
  std::uniform_int_distribution<int32_t> draw(0, 0x7fffffff);
  int32_t seed = draw(device);
  const std::shared_ptr<ProcessGroup> g = Resolve(group);
  if (Trivial(g)) return seed;
  if (g->rank() != 0) seed = 0;  // mmengine: non-zero ranks start from 0
  // Through the comm device (NCCL takes no host memory).
  DK_RETURN_IF_ERROR(
      Broadcast(TensorRef(&seed, 1, DataType::kInt32), 0, g.get()));
  return seed;
}

absl::Status AllReduceDict(const std::map<std::string, TensorRef>& data,
                           absl::string_view op, ProcessGroup* group) {
  DK_ASSIGN_OR_RETURN(ReduceOp reduce_op, ParseReduceOp(op));
  const std::shared_ptr<ProcessGroup> g = Resolve(group);
  if (Trivial(g) || data.empty()) return absl::OkStatus();
  std::vector<TensorRef> values;
  for (const auto& [key, t] : data) {
    if (t.dtype() != data.begin()->second.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all_reduce_dict: value '", key, "' is ", DataTypeName(t.dtype()),
          " but the others are ", DataTypeName(data.begin()->second.dtype())));
    }
    values.push_back(t);
  }
  return FlatAllReduce(values, reduce_op, g.get());
}

std::vector<std::vector<size_t>> TakeTensorBuckets(
    const std::vector<TensorRef>& params, int bucket_size_mb) {
  // Per dtype, in first-seen order of dtypes.
  std::vector<DataType> order;
  std::map<DataType, std::vector<size_t>> open;
  std::map<DataType, size_t> open_bytes;
  std::vector<std::vector<size_t>> emitted;
  const size_t limit =
      bucket_size_mb > 0 ? static_cast<size_t>(bucket_size_mb) << 20 : 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const DataType dt = params[i].dtype();
    if (!open.count(dt)) order.push_back(dt);
    std::vector<size_t>& bucket = open[dt];
    if (limit > 0 && !bucket.empty() &&
        open_bytes[dt] + params[i].nbytes() > limit) {
      emitted.push_back(std::move(bucket));
      bucket.clear();
      open_bytes[dt] = 0;
    }
    bucket.push_back(i);
    open_bytes[dt] += params[i].nbytes();
  }
  for (DataType dt : order) {
    if (!open[dt].empty()) emitted.push_back(std::move(open[dt]));
  }
  return emitted;
}

absl::Status AllReduceParams(const std::vector<TensorRef>& params,
                             bool coalesce, int bucket_size_mb,
                             absl::string_view op, ProcessGroup* group) {
  DK_ASSIGN_OR_RETURN(ReduceOp reduce_op, ParseReduceOp(op));
  return AllReduceParams(params, coalesce, bucket_size_mb, reduce_op, group);
}

absl::Status AllReduceParams(const std::vector<TensorRef>& params,
                             bool coalesce, int bucket_size_mb,
                             ReduceOp reduce_op, ProcessGroup* group) {
  const std::shared_ptr<ProcessGroup> g = Resolve(group);
  if (Trivial(g)) return absl::OkStatus();
  if (!coalesce) {
    for (const TensorRef& p : params) {
      DK_RETURN_IF_ERROR(OnCommDevice(
          p, g->comm_device(), Access::kReadWrite,
          [&](const TensorRef& t) { return g->AllReduce(t, reduce_op); }));
    }
    return absl::OkStatus();
  }
  for (const std::vector<size_t>& bucket :
       TakeTensorBuckets(params, bucket_size_mb)) {
    std::vector<TensorRef> tensors;
    for (size_t i : bucket) tensors.push_back(params[i]);
    DK_RETURN_IF_ERROR(FlatAllReduce(tensors, reduce_op, g.get()));
  }
  return absl::OkStatus();
}

}  // namespace dist
}  // namespace distkit
