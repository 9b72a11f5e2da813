// ShardedSnapshot: the in-memory snapshot of a sharded trainer's state,
// where each rank's shard exists once (FSDP: this rank's shard of each flat
// parameter and of the optimizer's per-element state; dk_shard's
// dk_shard_local). The C ABI's dk_sharded_snapshot_*; Python's
// distkit.elastic does the same over torch objects
// (elastic/sharded_snapshot.py), and docs/architecture.md ("Elastic
// training") describes both.
//
// Each commit, collective over the group the shards are laid out on (its
// rank r holds shard r), copies this rank's registered buffers and hands the
// copy to its left-hand neighbour: rank r then holds shards r and r + 1 mod
// N, so any one lost shard survives in a peer's memory, at 2/N of the state
// per rank. A commit comes into force once every member holds its part (a
// barrier); a failure before that leaves it pending beside the one in force,
// so that whichever of the two every shard survives in can be recovered.
//
// (The commit is pending from the exchange's start, with this rank's own
// shard, and gets its neighbour's once the exchange ends here.)
//
// After a change of membership every member of the new group calls Fetch (a
// replacement with a snapshot that holds nothing): the members agree on the
// newest commit all of whose shards they still hold, and each receives the
// shards it asks for from a member holding them: its own again when the
// group kept its size (a survivor's is local; a replacement's comes from its
// neighbour), every shard to lay the state out anew over fewer ranks. The
// trainer loads them (dk_shard_load_sharded for parameters) and commits a
// snapshot of the new layout: a new ShardedSnapshot, whose commits then
// number on from 1.

#ifndef DISTKIT_CC_ELASTIC_SHARDED_SNAPSHOT_H_
#define DISTKIT_CC_ELASTIC_SHARDED_SNAPSHOT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "cc/elastic/buffer_layout.h"
#include "cc/elastic/registered_buffers.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace elastic {

class ShardedSnapshot {
 public:
  // What Fetch agreed on: the commit loaded and the size of the group that
  // committed it (shards are numbered 0 .. world - 1).
  struct Fetched {
    int64_t commit = 0;
    int world = 0;
  };

  ShardedSnapshot() = default;
  ShardedSnapshot(const ShardedSnapshot&) = delete;
  ShardedSnapshot& operator=(const ShardedSnapshot&) = delete;

  // Local. Adds `bytes` of host memory at `data` (borrowed until the
  // snapshot is destroyed) under `name`: this rank's part of a sharded
  // state. Every rank registers the same names in the same order (Commit
  // checks); sizes may differ. Before the first Commit or Fetch, else
  // FAILED_PRECONDITION.
  absl::Status Register(absl::string_view name, void* data, int64_t bytes);

  // Collective over `group`, whose member r holds shard r: copies this
  // rank's buffers and exchanges the copies (member r keeps shards r and
  // r + 1 mod N), numbered one past the newest any member holds. In force
  // once every member holds its part; when the group fails first, this
  // rank keeps what it got of it as pending beside the commit in force (and
  // returns the error). INVALID_ARGUMENT on every member, naming the ranks,
  // when the registrations' names differ; FAILED_PRECONDITION on every
  // member, naming the ranks, when a member's snapshot holds commits of a
  // group of another size (after a change of membership the trainer commits
  // a new snapshot of its new layout); RESOURCE_EXHAUSTED on every member
  // at once, the others naming it, when a member cannot allocate its copy
  // or its neighbour's (nothing changes then).
  absl::Status Commit(ProcessGroup& group);

  // Collective over `group` (made after a change of membership). The
  // members agree on the newest commit held in force or pending whose every
  // shard some member holds, and each member receives the shards it asks
  // for (`wanted`: indices in that commit's group; nullopt: every shard)
  // from the first member holding each. Readable through Shard() until the
  // next Commit or Fetch. The chosen commit is then the one in force on the
  // members holding it, so a Commit of the same layout may follow on a
  // snapshot that registered its buffers before (a replacement's empty one
  // cannot: Fetch ends registration; it commits a new snapshot instead).
  // After a change of size, commit a new snapshot, and keep this one until
  // that snapshot's first commit has succeeded. Until the members' next
  // commit, a shard a replacement fetched is held only by its neighbour.
  // INVALID_ARGUMENT when members holding commits registered different
  // names. On every member alike:
  // FAILED_PRECONDITION when no member holds a commit, DATA_LOSS naming the
  // shards and the ranks that held them when the newest commit's shards are
  // lost with no older commit whole, INVALID_ARGUMENT for a wanted index
  // outside the commit's group, RESOURCE_EXHAUSTED (the others naming the
  // member) when a member cannot allocate what it sends or receives.
  absl::StatusOr<Fetched> Fetch(ProcessGroup& group,
                                std::optional<std::vector<int>> wanted);

  // Local, after Fetch: buffer `buffer` (in registration order) of shard
  // `index`, one of those asked for. NOT_FOUND for one not fetched,
  // OUT_OF_RANGE for a buffer past the shard's count.
  absl::StatusOr<absl::Span<const char>> Shard(int index, int buffer) const;

  // Where Commit stops on this rank, returning UNAVAILABLE as if the group
  // had failed there (tests of recovery from an interrupted commit).
  enum class StopForTesting { kNone, kBeforeExchange, kBeforeBarrier };
  void SetStopForTesting(StopForTesting where) {
    absl::MutexLock lock(&mu_);
    stop_ = where;
  }

  // The number of the commit in force; 0 when none is. Waits while a
  // Commit or Fetch runs on another thread.
  int64_t commit_number() const;
  // The bytes of host memory this snapshot holds: the commit in force and a
  // pending one (this rank's shard and its neighbour's each), and what the
  // last Fetch received. Waits while a Commit or Fetch runs.
  int64_t bytes() const;

 private:
  // A shard as it travels and is held: the count of buffers, their sizes,
  // then each buffer from a 64-byte boundary.
  struct Blob {
    std::shared_ptr<char[]> data;
    int64_t bytes = 0;
  };
  // One commit as this rank holds it.
  struct CommitCopy {
    int64_t number = 0;
    int world = 0;
    int own = -1;                // this rank's shard index in it
    std::map<int, Blob> shards;  // own and its neighbour's
  };

  absl::StatusOr<Blob> PackLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The commit numbered `number` this rank holds (in force or pending), or
  // null.
  const CommitCopy* FindLocked(int64_t number) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  RegisteredBuffers buffers_ ABSL_GUARDED_BY(mu_){
      "sharded snapshot", "Commit or Fetch",
      " (a new layout takes a new snapshot)"};
  std::optional<CommitCopy> in_force_ ABSL_GUARDED_BY(mu_);
  std::optional<CommitCopy> pending_ ABSL_GUARDED_BY(mu_);
  std::map<int, Blob> fetched_ ABSL_GUARDED_BY(mu_);
  StopForTesting stop_ ABSL_GUARDED_BY(mu_) = StopForTesting::kNone;
  int64_t fetched_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // received, not held
};

}  // namespace elastic
}  // namespace distkit

#endif  // DISTKIT_CC_ELASTIC_SHARDED_SNAPSHOT_H_
