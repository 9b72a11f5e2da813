// The C ABI's sections "Elastic snapshots", a trainer's state in memory
// (distkit::elastic::Snapshot), committed, restored and synced from peers
// after a shrink or a grow, and "Sharded elastic snapshots", sharded state
// kept in peers' memory (distkit::elastic::ShardedSnapshot), committed with
// a copy at each rank's neighbour and fetched by the members of a new group.
// One translation unit for the two: they take the caller's buffers alike.

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "capi/entry_point.h"
#include "cc/core/status.h"
#include "cc/elastic/sharded_snapshot.h"
#include "cc/elastic/snapshot.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

struct dk_snapshot {
  distkit::elastic::Snapshot rep;
};

struct dk_sharded_snapshot {
  distkit::elastic::ShardedSnapshot rep;
};

namespace distkit {
namespace capi {
namespace {

// dk_snapshot_register and dk_sharded_snapshot_register: the caller's
// buffer `name` in a snapshot of either kind (`kind` in the error for a
// size no buffer can have).
template <typename Handle>
dk_status_t RegisterBuffer(Handle* snapshot, const char* kind, const char* name,
                           void* data, size_t bytes, dk_error_t** err) {
  return OnHandle(snapshot, "snapshot", err, [&](Handle& s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(name, "name"));
    DK_RETURN_IF_ERROR(
        CheckBufferBytes(bytes, absl::StrCat(kind, ": buffer '", name, "'")));
    return s.rep.Register(name, data, static_cast<int64_t>(bytes));
  });
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::capi::RegisterBuffer;
using ::distkit::elastic::ShardedSnapshot;

// The C ABI, section "Elastic snapshots".

extern "C" {

dk_status_t dk_snapshot_create(dk_snapshot_t** out, dk_error_t** err) {
  return NewHandle(out, err, []() -> absl::StatusOr<dk_snapshot*> {
    return new dk_snapshot();
  });
}

void dk_snapshot_destroy(dk_snapshot_t* snapshot) { delete snapshot; }

dk_status_t dk_snapshot_register(dk_snapshot_t* snapshot, const char* name,
                                 void* data, size_t bytes, dk_error_t** err) {
  return RegisterBuffer(snapshot, "snapshot", name, data, bytes, err);
}

dk_status_t dk_snapshot_commit(dk_snapshot_t* snapshot, dk_error_t** err) {
  return OnHandle(snapshot, "snapshot", err,
                  [](dk_snapshot& s) { return s.rep.Commit(); });
}

dk_status_t dk_snapshot_sync(dk_snapshot_t* snapshot, dk_group_t* group,
                             int64_t* commit_out, dk_error_t** err) {
  return OnHandle(
      snapshot, "snapshot", err, [&](dk_snapshot& s) -> absl::Status {
        DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
        DK_ASSIGN_OR_RETURN(int64_t commit, s.rep.Sync(*g));
        if (commit_out != nullptr) *commit_out = commit;
        return absl::OkStatus();
      });
}

dk_status_t dk_snapshot_restore(dk_snapshot_t* snapshot, dk_error_t** err) {
  return OnHandle(snapshot, "snapshot", err,
                  [](dk_snapshot& s) { return s.rep.Restore(); });
}

int64_t dk_snapshot_commit_number(const dk_snapshot_t* snapshot) {
  if (snapshot == nullptr) return -1;
  return NoThrow(int64_t{-1}, [&] { return snapshot->rep.commit_number(); });
}

int64_t dk_snapshot_bytes(const dk_snapshot_t* snapshot) {
  if (snapshot == nullptr) return -1;
  return NoThrow(int64_t{-1}, [&] { return snapshot->rep.bytes(); });
}

}  // extern "C"

// The C ABI, section "Sharded elastic snapshots".

extern "C" {

dk_status_t dk_sharded_snapshot_create(dk_sharded_snapshot_t** out,
                                       dk_error_t** err) {
  return NewHandle(out, err, []() -> absl::StatusOr<dk_sharded_snapshot*> {
    return new dk_sharded_snapshot();
  });
}

void dk_sharded_snapshot_destroy(dk_sharded_snapshot_t* snapshot) {
  delete snapshot;
}

dk_status_t dk_sharded_snapshot_register(dk_sharded_snapshot_t* snapshot,
                                         const char* name, void* data,
                                         size_t bytes, dk_error_t** err) {
  return RegisterBuffer(snapshot, "sharded snapshot", name, data, bytes, err);
}

dk_status_t dk_sharded_snapshot_commit(dk_sharded_snapshot_t* snapshot,
                                       dk_group_t* group, dk_error_t** err) {
  return OnHandle(
      snapshot, "snapshot", err, [&](dk_sharded_snapshot& s) -> absl::Status {
        DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
        return s.rep.Commit(*g);
      });
}

dk_status_t dk_sharded_snapshot_fetch(dk_sharded_snapshot_t* snapshot,
                                      dk_group_t* group, const int32_t* wanted,
                                      size_t num_wanted, int64_t* commit_out,
                                      int32_t* world_out, dk_error_t** err) {
  return OnHandle(
      snapshot, "snapshot", err, [&](dk_sharded_snapshot& s) -> absl::Status {
        DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
        std::optional<std::vector<int>> asked;
        if (wanted != nullptr) {
          DK_RETURN_IF_ERROR(
              CheckCount(num_wanted, sizeof(int32_t), "num_wanted"));
          asked.emplace(wanted, wanted + num_wanted);
        }
        DK_ASSIGN_OR_RETURN(ShardedSnapshot::Fetched fetched,
                            s.rep.Fetch(*g, std::move(asked)));
        if (commit_out != nullptr) *commit_out = fetched.commit;
        if (world_out != nullptr) *world_out = fetched.world;
        return absl::OkStatus();
      });
}

dk_status_t dk_sharded_snapshot_shard(const dk_sharded_snapshot_t* snapshot,
                                      int32_t index, int32_t buffer,
                                      const void** data_out, size_t* bytes_out,
                                      dk_error_t** err) {
  return OnHandle(snapshot, "snapshot", err,
                  [&](const dk_sharded_snapshot& s) -> absl::Status {
                    DK_RETURN_IF_ERROR(NotNull(data_out, "data_out"));
                    DK_RETURN_IF_ERROR(NotNull(bytes_out, "bytes_out"));
                    DK_ASSIGN_OR_RETURN(absl::Span<const char> shard,
                                        s.rep.Shard(index, buffer));
                    *data_out = shard.data();
                    *bytes_out = shard.size();
                    return absl::OkStatus();
                  });
}

int64_t dk_sharded_snapshot_commit_number(
    const dk_sharded_snapshot_t* snapshot) {
  if (snapshot == nullptr) return -1;
  return NoThrow(int64_t{-1}, [&] { return snapshot->rep.commit_number(); });
}

int64_t dk_sharded_snapshot_bytes(const dk_sharded_snapshot_t* snapshot) {
  if (snapshot == nullptr) return -1;
  return NoThrow(int64_t{-1}, [&] { return snapshot->rep.bytes(); });
}

}  // extern "C"
