// Snapshot: a trainer's state kept in memory, so that after a lost rank the
// job goes on from its peers' memory instead of a checkpoint file (the C ABI's
// dk_snapshot_*, and through it the Rust and Go Snapshot types; Python's
// distkit.elastic.State is the same idea over torch objects).
//
// The trainer registers named host buffers (parameters, optimizer state, a
// step counter, the data position: anything it needs to redo a step), then
// calls Commit() at points where every rank is at the same step. Each commit
// copies every buffer (data-parallel state: every rank holds a full copy) and
// numbers the snapshot 1, 2, ...; the previous snapshot stays until the copy
// is complete. After a shrink or a grow, every member of the new group calls
// Sync(group): the members agree on the newest commit any of them holds (a
// survivor whose last step completed and committed while another failed in
// it holds a newer one; a replacement holds none), that snapshot is
// broadcast from the first member holding it, and every rank, the sender
// included, copies it into its registered buffers. Restore() loads this
// rank's own snapshot without communication.

#ifndef DISTKIT_CC_ELASTIC_SNAPSHOT_H_
#define DISTKIT_CC_ELASTIC_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "cc/elastic/buffer_layout.h"
#include "cc/elastic/host_collectives.h"
#include "cc/elastic/registered_buffers.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace elastic {

class Snapshot {
 public:
  Snapshot() = default;
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  // Local. Adds `bytes` of host memory at `data` (borrowed until the
  // Snapshot is destroyed) under `name`. Every rank registers the same
  // names and sizes in the same order (Sync checks). Register every buffer
  // before the first Commit or Sync: afterwards it is FAILED_PRECONDITION
  // (the snapshot held would not cover the new buffer).
  absl::Status Register(absl::string_view name, void* data, int64_t bytes);

  // Local. Copies every registered buffer into a new snapshot, which then
  // replaces the one held; its number is the held one's + 1.
  absl::Status Commit();

  // Local. Copies the snapshot held back into the registered buffers;
  // FAILED_PRECONDITION when none is held.
  absl::Status Restore();

  // Collective over `group`: every member calls it after the group changed
  // (a survivor on the shrunk or grown group, a replacement on the world its
  // init joined). Agrees on the newest commit any member holds, broadcasts
  // it from the first member holding it and loads it into every member's
  // registered buffers; returns its number, which every member then holds.
  // INVALID_ARGUMENT on every member, naming the buffer and the ranks, when
  // the members' registrations differ; FAILED_PRECONDITION when no member
  // holds a snapshot; RESOURCE_EXHAUSTED on every member at once (the others
  // naming it) when a receiver cannot allocate its copy. When the broadcast
  // fails (another rank lost), a rank
  // keeps the snapshot it held and its buffers are left as they were; Sync
  // again on the next group.
  absl::StatusOr<int64_t> Sync(ProcessGroup& group);

  // The number of the snapshot held; 0 when none is (nothing committed, or
  // a replacement before its Sync). These three wait while a Commit,
  // Restore or Sync runs on another thread (a Sync holds the snapshot
  // across its collectives).
  int64_t commit_number() const;
  // The bytes of host memory the snapshot held takes (0 when none).
  int64_t bytes() const;
  // The bytes the registered buffers take (what one commit copies).
  int64_t registered_bytes() const;

 private:
  void LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  RegisteredBuffers buffers_ ABSL_GUARDED_BY(mu_){"snapshot", "Commit or Sync",
                                                  ""};
  HostBuffer held_ ABSL_GUARDED_BY(mu_);
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t commit_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace elastic
}  // namespace distkit

#endif  // DISTKIT_CC_ELASTIC_SNAPSHOT_H_
