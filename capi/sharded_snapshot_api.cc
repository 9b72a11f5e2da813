// The C ABI, section "Sharded elastic snapshots": sharded state kept in
// peers' memory (distkit::elastic::ShardedSnapshot), committed with a copy
// at each rank's neighbour and fetched by the members of a new group.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "capi/handles.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/elastic/sharded_snapshot.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

struct dk_sharded_snapshot {
  distkit::elastic::ShardedSnapshot rep;
};

using ::distkit::ProcessGroup;
using ::distkit::TensorRef;
using ::distkit::capi::GroupOf;
using ::distkit::capi::Guard;
using ::distkit::capi::NotNull;
using ::distkit::elastic::ShardedSnapshot;

extern "C" {

dk_status_t dk_sharded_snapshot_create(dk_sharded_snapshot_t** out,
                                       dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    *out = new dk_sharded_snapshot();
    return absl::OkStatus();
  });
}

void dk_sharded_snapshot_destroy(dk_sharded_snapshot_t* snapshot) {
  delete snapshot;
}

dk_status_t dk_sharded_snapshot_register(dk_sharded_snapshot_t* snapshot,
                                         const char* name, void* data,
                                         size_t bytes, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(snapshot, "snapshot"));
    DK_RETURN_IF_ERROR(NotNull(name, "name"));
    if (bytes > static_cast<size_t>(TensorRef::kMaxBytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sharded snapshot: buffer '", name, "' of ", bytes,
                       " bytes is larger than any buffer can be (2^47)"));
    }
    return snapshot->rep.Register(name, data, static_cast<int64_t>(bytes));
  });
}

dk_status_t dk_sharded_snapshot_commit(dk_sharded_snapshot_t* snapshot,
                                       dk_group_t* group, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(snapshot, "snapshot"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    return snapshot->rep.Commit(*g);
  });
}

dk_status_t dk_sharded_snapshot_fetch(dk_sharded_snapshot_t* snapshot,
                                      dk_group_t* group, const int32_t* wanted,
                                      size_t num_wanted, int64_t* commit_out,
                                      int32_t* world_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(snapshot, "snapshot"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    std::optional<std::vector<int>> asked;
    if (wanted != nullptr) {
      DK_RETURN_IF_ERROR(::distkit::capi::CheckCount(
          num_wanted, sizeof(int32_t), "num_wanted"));
      asked.emplace(wanted, wanted + num_wanted);
    }
    DK_ASSIGN_OR_RETURN(ShardedSnapshot::Fetched fetched,
                        snapshot->rep.Fetch(*g, std::move(asked)));
    if (commit_out != nullptr) *commit_out = fetched.commit;
    if (world_out != nullptr) *world_out = fetched.world;
    return absl::OkStatus();
  });
}

dk_status_t dk_sharded_snapshot_shard(const dk_sharded_snapshot_t* snapshot,
                                      int32_t index, int32_t buffer,
                                      const void** data_out, size_t* bytes_out,
                                      dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(snapshot, "snapshot"));
    DK_RETURN_IF_ERROR(NotNull(data_out, "data_out"));
    DK_RETURN_IF_ERROR(NotNull(bytes_out, "bytes_out"));
    DK_ASSIGN_OR_RETURN(absl::Span<const char> shard,
                        snapshot->rep.Shard(index, buffer));
    *data_out = shard.data();
    *bytes_out = shard.size();
    return absl::OkStatus();
  });
}

int64_t dk_sharded_snapshot_commit_number(
    const dk_sharded_snapshot_t* snapshot) {
  return snapshot == nullptr ? -1 : snapshot->rep.commit_number();
}

int64_t dk_sharded_snapshot_bytes(const dk_sharded_snapshot_t* snapshot) {
  return snapshot == nullptr ? -1 : snapshot->rep.bytes();
}

}  // extern "C"
