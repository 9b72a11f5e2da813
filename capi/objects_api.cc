// The C ABI, section "Several tensors, objects, results": mmengine's helpers
// over a group (all_reduce_params, sync_random_seed, the object collectives,
// collect_results).

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "capi/entry_point.h"
#include "cc/core/reduce_op.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/dist_api/collect_results.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/object_collectives.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

namespace distkit {
namespace capi {
namespace {

// Guard for an object collective: the outs checked, the caller's `size`
// bytes at `data`, then the group; `gather(group, object)` returns the
// items for the caller (absl::StatusOr of a list, or of std::optional of
// one where only some ranks receive it).
template <typename F>
dk_status_t OnObject(dk_group_t* group, const void* data, size_t size,
                     dk_bytes_t** items_out, size_t* count_out,
                     dk_error_t** err, F&& gather) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    if (size > 0) DK_RETURN_IF_ERROR(NotNull(data, "data"));
    DK_RETURN_IF_ERROR(CheckCount(size, 1, "size"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(
        auto items,
        gather(g.get(), std::string(static_cast<const char*>(data), size)));
    return ReturnItems(items, items_out, count_out);
  });
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::capi::OnObject;

extern "C" {

dk_status_t dk_group_all_reduce_coalesced(dk_group_t* group,
                                          DLTensor* const* tensors,
                                          size_t num_tensors, dk_reduce_op_t op,
                                          int32_t coalesce,
                                          int64_t bucket_size_mb,
                                          dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    if (num_tensors > 0) DK_RETURN_IF_ERROR(NotNull(tensors, "tensors"));
    DK_RETURN_IF_ERROR(
        CheckCount(num_tensors, sizeof(DLTensor*), "num_tensors"));
    // The count is checked above, so TensorArgs reports only the tensors.
    DK_ASSIGN_OR_RETURN(std::vector<TensorRef> refs,
                        TensorArgs(tensors, num_tensors, "tensors", false));
    DK_ASSIGN_OR_RETURN(distkit::ReduceOp r, ReduceOpArg(op));
    // Into int without wrapping (2^32 + 1 would become 1 MiB): <= 0 stays
    // "one bucket per dtype", and INT_MAX MiB is past any tensor's 2^47 bytes.
    const int mb =
        bucket_size_mb <= 0
            ? -1
            : static_cast<int>(std::min<int64_t>(bucket_size_mb, INT_MAX));
    return distkit::dist::AllReduceParams(refs, coalesce != 0, mb, r, g.get());
  });
}

dk_status_t dk_group_sync_random_seed(dk_group_t* group, int32_t* out,
                                      dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOrNone(group));
    DK_ASSIGN_OR_RETURN(*out, distkit::dist::SyncRandomSeed(g.get()));
    return absl::OkStatus();
  });
}

dk_status_t dk_group_all_gather_object(dk_group_t* group, const void* data,
                                       size_t size, dk_bytes_t** items_out,
                                       size_t* count_out, dk_error_t** err) {
  return OnObject(group, data, size, items_out, count_out, err,
                  [](ProcessGroup* g, const std::string& object) {
                    return distkit::dist::AllGatherObject(object, g);
                  });
}

dk_status_t dk_group_gather_object(dk_group_t* group, const void* data,
                                   size_t size, int32_t dst,
                                   dk_bytes_t** items_out, size_t* count_out,
                                   dk_error_t** err) {
  return OnObject(group, data, size, items_out, count_out, err,
                  [dst](ProcessGroup* g, const std::string& object) {
                    return distkit::dist::GatherObject(object, dst, g);
                  });
}

dk_status_t dk_group_broadcast_object_list(
    dk_group_t* group, const dk_bytes_t* items, size_t count, int32_t src,
    dk_bytes_t** items_out, size_t* count_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    std::vector<std::string> list;
    if (g->rank() == src) {
      DK_ASSIGN_OR_RETURN(list, ReadItems(items, count, "items"));
    }
    DK_RETURN_IF_ERROR(distkit::dist::BroadcastObjectList(&list, src, g.get()));
    return ReturnItems(list, items_out, count_out);
  });
}

dk_status_t dk_group_collect_results(dk_group_t* group, const dk_bytes_t* part,
                                     size_t part_count, int64_t size,
                                     const char* device, const char* tmpdir,
                                     dk_bytes_t** items_out, size_t* count_out,
                                     dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    DK_RETURN_IF_ERROR(NotNull(device, "device"));
    DK_ASSIGN_OR_RETURN(std::vector<std::string> items,
                        ReadItems(part, part_count, "part"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOrNone(group));
    std::optional<std::string> dir;
    if (tmpdir != nullptr) dir = tmpdir;
    DK_ASSIGN_OR_RETURN(
        std::optional<std::vector<std::string>> results,
        distkit::dist::CollectResults(items, size, device, dir, g.get()));
    return ReturnItems(results, items_out, count_out);
  });
}

}  // extern "C"
