// The C ABI, section "Several tensors, objects, results": mmengine's helpers
// over a group (all_reduce_params, sync_random_seed, the object collectives,
// collect_results).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "capi/caller_memory.h"
#include "capi/handles.h"
#include "cc/core/reduce_op.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/dist_api/collect_results.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/object_collectives.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

using ::distkit::ProcessGroup;
using ::distkit::TensorRef;
using ::distkit::capi::CheckCount;
using ::distkit::capi::CheckOuts;
using ::distkit::capi::GroupOf;
using ::distkit::capi::Guard;
using ::distkit::capi::NotNull;
using ::distkit::capi::ReadItems;
using ::distkit::capi::ReduceOpArg;
using ::distkit::capi::ReturnItems;
using ::distkit::capi::TensorArg;

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
    std::vector<TensorRef> refs;
    for (size_t i = 0; i < num_tensors; ++i) {
      DK_ASSIGN_OR_RETURN(
          TensorRef t,
          TensorArg(tensors[i], absl::StrCat("tensors[", i, "]").c_str()));
      refs.push_back(t);
    }
    DK_ASSIGN_OR_RETURN(distkit::ReduceOp r, ReduceOpArg(op));
    return distkit::dist::AllReduceParams(
        refs, coalesce != 0, static_cast<int>(bucket_size_mb), r, g.get());
  });
}

dk_status_t dk_group_sync_random_seed(dk_group_t* group, int32_t* out,
                                      dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    ProcessGroup* g = nullptr;
    if (group != nullptr || distkit::dist::IsDistributed()) {
      DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> pg, GroupOf(group));
      g = pg.get();
    }
    DK_ASSIGN_OR_RETURN(*out, distkit::dist::SyncRandomSeed(g));
    return absl::OkStatus();
  });
}

dk_status_t dk_group_all_gather_object(dk_group_t* group, const void* data,
                                       size_t size, dk_bytes_t** items_out,
                                       size_t* count_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    if (size > 0) DK_RETURN_IF_ERROR(NotNull(data, "data"));
    DK_RETURN_IF_ERROR(CheckCount(size, 1, "size"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(
        std::vector<std::string> all,
        distkit::dist::AllGatherObject(
            std::string(static_cast<const char*>(data), size), g.get()));
    return ReturnItems(all, items_out, count_out);
  });
}

dk_status_t dk_group_gather_object(dk_group_t* group, const void* data,
                                   size_t size, int32_t dst,
                                   dk_bytes_t** items_out, size_t* count_out,
                                   dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    if (size > 0) DK_RETURN_IF_ERROR(NotNull(data, "data"));
    DK_RETURN_IF_ERROR(CheckCount(size, 1, "size"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(
        std::optional<std::vector<std::string>> all,
        distkit::dist::GatherObject(
            std::string(static_cast<const char*>(data), size), dst, g.get()));
    if (!all.has_value()) return absl::OkStatus();
    return ReturnItems(*all, items_out, count_out);
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
    ProcessGroup* g = nullptr;
    if (group != nullptr || distkit::dist::IsDistributed()) {
      DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> pg, GroupOf(group));
      g = pg.get();
    }
    std::optional<std::string> dir;
    if (tmpdir != nullptr) dir = tmpdir;
    DK_ASSIGN_OR_RETURN(
        std::optional<std::vector<std::string>> results,
        distkit::dist::CollectResults(items, size, device, dir, g));
    if (!results.has_value()) return absl::OkStatus();
    return ReturnItems(*results, items_out, count_out);
  });
}

}  // extern "C"
