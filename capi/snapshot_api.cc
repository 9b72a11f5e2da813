// The C ABI, section "Elastic snapshots": a trainer's state in memory
// (distkit::elastic::Snapshot), committed, restored and synced from peers
// after a shrink or a grow.

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "capi/handles.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/elastic/snapshot.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

struct dk_snapshot {
  distkit::elastic::Snapshot rep;
};

using ::distkit::ProcessGroup;
using ::distkit::TensorRef;
using ::distkit::capi::GroupOf;
using ::distkit::capi::Guard;
using ::distkit::capi::NotNull;

extern "C" {

dk_status_t dk_snapshot_create(dk_snapshot_t** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    *out = new dk_snapshot();
    return absl::OkStatus();
  });
}

void dk_snapshot_destroy(dk_snapshot_t* snapshot) { delete snapshot; }

dk_status_t dk_snapshot_register(dk_snapshot_t* snapshot, const char* name,
                                 void* data, size_t bytes, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(snapshot, "snapshot"));
    DK_RETURN_IF_ERROR(NotNull(name, "name"));
    if (bytes > static_cast<size_t>(TensorRef::kMaxBytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("snapshot: buffer '", name, "' of ", bytes,
                       " bytes is larger than any buffer can be (2^47)"));
    }
    return snapshot->rep.Register(name, data, static_cast<int64_t>(bytes));
  });
}

dk_status_t dk_snapshot_commit(dk_snapshot_t* snapshot, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(snapshot, "snapshot"));
    return snapshot->rep.Commit();
  });
}

dk_status_t dk_snapshot_sync(dk_snapshot_t* snapshot, dk_group_t* group,
                             int64_t* commit_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(snapshot, "snapshot"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(int64_t commit, snapshot->rep.Sync(*g));
    if (commit_out != nullptr) *commit_out = commit;
    return absl::OkStatus();
  });
}

dk_status_t dk_snapshot_restore(dk_snapshot_t* snapshot, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(snapshot, "snapshot"));
    return snapshot->rep.Restore();
  });
}

int64_t dk_snapshot_commit_number(const dk_snapshot_t* snapshot) {
  return snapshot == nullptr ? -1 : snapshot->rep.commit_number();
}

int64_t dk_snapshot_bytes(const dk_snapshot_t* snapshot) {
  return snapshot == nullptr ? -1 : snapshot->rep.bytes();
}

}  // extern "C"
