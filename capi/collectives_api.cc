// The C ABI, section "Collectives": each entry point names its operation's
// two forms and its arguments; CollectiveCall does the rest.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "capi/collective_call.h"
#include "capi/entry_point.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

namespace distkit {
namespace capi {
namespace {

// all_to_all's split sizes: none (NULL: equal parts), or one per rank.
absl::StatusOr<std::vector<int64_t>> Splits(const ProcessGroup& g,
                                            const int64_t* splits,
                                            size_t num_splits) {
  if (splits == nullptr) return std::vector<int64_t>();
  if (num_splits != static_cast<size_t>(g.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all_to_all: num_splits is ", num_splits, ", but group '", g.name(),
        "' has ", g.size(), " ranks (one split per rank)"));
  }
  return std::vector<int64_t>(splits, splits + num_splits);
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::capi::CollectiveCall;
using ::distkit::capi::RunCollective;
using ::distkit::capi::Splits;

extern "C" {

dk_status_t dk_group_all_reduce(dk_group_t* group, DLTensor* data,
                                dk_reduce_op_t op, dk_work_t** work_out,
                                dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call(&ProcessGroup::AllReduce, &ProcessGroup::AllReduceAsync,
                TensorArg(data, "data"), ReduceOpArg(op));
  });
}

dk_status_t dk_group_broadcast(dk_group_t* group, DLTensor* data, int32_t root,
                               dk_work_t** work_out, dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call(&ProcessGroup::Broadcast, &ProcessGroup::BroadcastAsync,
                TensorArg(data, "data"), root);
  });
}

dk_status_t dk_group_reduce(dk_group_t* group, DLTensor* data,
                            dk_reduce_op_t op, int32_t root,
                            dk_work_t** work_out, dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call(&ProcessGroup::Reduce, &ProcessGroup::ReduceAsync,
                TensorArg(data, "data"), ReduceOpArg(op), root);
  });
}

dk_status_t dk_group_all_gather(dk_group_t* group, const DLTensor* input,
                                DLTensor* output, dk_work_t** work_out,
                                dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call(&ProcessGroup::AllGather, &ProcessGroup::AllGatherAsync,
                TensorArg(input, "input"), TensorArg(output, "output"));
  });
}

dk_status_t dk_group_gather(dk_group_t* group, const DLTensor* input,
                            DLTensor* output, int32_t root,
                            dk_work_t** work_out, dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call(&ProcessGroup::Gather, &ProcessGroup::GatherAsync,
                TensorArg(input, "input"),
                call.TensorOnRoot(output, root, "output"), root);
  });
}

dk_status_t dk_group_scatter(dk_group_t* group, const DLTensor* input,
                             DLTensor* output, int32_t root,
                             dk_work_t** work_out, dk_error_t** err) {
  return RunCollective(
      group, work_out, err, [&](CollectiveCall& call) -> absl::Status {
        // The output is checked before the root's input.
        DK_ASSIGN_OR_RETURN(TensorRef out, TensorArg(output, "output"));
        return call(&ProcessGroup::Scatter, &ProcessGroup::ScatterAsync,
                    call.TensorOnRoot(input, root, "input"), out, root);
      });
}

dk_status_t dk_group_reduce_scatter(dk_group_t* group, const DLTensor* input,
                                    DLTensor* output, dk_reduce_op_t op,
                                    dk_work_t** work_out, dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call(&ProcessGroup::ReduceScatter, &ProcessGroup::ReduceScatterAsync,
                TensorArg(input, "input"), TensorArg(output, "output"),
                ReduceOpArg(op));
  });
}

dk_status_t dk_group_all_to_all(dk_group_t* group, const DLTensor* input,
                                const int64_t* input_splits, DLTensor* output,
                                const int64_t* output_splits, size_t num_splits,
                                dk_work_t** work_out, dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call(&ProcessGroup::AllToAll, &ProcessGroup::AllToAllAsync,
                TensorArg(input, "input"), TensorArg(output, "output"),
                Splits(call.group(), input_splits, num_splits),
                Splits(call.group(), output_splits, num_splits));
  });
}

dk_status_t dk_group_barrier(dk_group_t* group, dk_work_t** work_out,
                             dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call(&ProcessGroup::Barrier, &ProcessGroup::BarrierAsync);
  });
}

dk_status_t dk_group_send(dk_group_t* group, const DLTensor* data, int32_t dst,
                          int32_t tag, dk_work_t** work_out, dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call.Start(&ProcessGroup::SendAsync, TensorArg(data, "data"), dst,
                      tag);
  });
}

dk_status_t dk_group_recv(dk_group_t* group, DLTensor* data, int32_t src,
                          int32_t tag, dk_work_t** work_out, dk_error_t** err) {
  return RunCollective(group, work_out, err, [&](CollectiveCall& call) {
    return call.Start(&ProcessGroup::RecvAsync, TensorArg(data, "data"), src,
                      tag);
  });
}

}  // extern "C"
