// Whether a same-host peer is still there, for ranks that wait on each other
// through shared memory (ShmBackend). Each rank keeps a LivenessRecord in
// its header of the segment: its pid, its pid namespace, and a heartbeat
// that a process-wide thread advances every 100 ms while the record is
// registered. A waiting rank watches the peers it waits for (PeerWatch):
// - a peer whose process is gone or a zombie (same pid namespace only:
//   a pid from another namespace means nothing here) has exited;
// - a peer whose heartbeat has not moved for DISTKIT_HEARTBEAT_TIMEOUT
//   seconds of the watcher's own attention (default 60; 0 turns it off) is
//   unresponsive: frozen (SIGSTOP), or dead in another pid namespace.
// Exiting is not failing: the caller asks only about peers whose part of
// the operation it still needs (a rank that published its last step and
// left is fine).

#ifndef DISTKIT_CC_COMM_SHM_PEER_LIVENESS_H_
#define DISTKIT_CC_COMM_SHM_PEER_LIVENESS_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"

namespace distkit {

// Lives in shared memory: plain atomics, no pointers.
struct LivenessRecord {
  std::atomic<int32_t> pid;
  std::atomic<uint64_t> pid_namespace;  // inode of /proc/self/ns/pid
  std::atomic<int64_t> heartbeat;       // advances while the owner lives
};

// A heartbeat that never advances because its owner runs without one
// (DISTKIT_BENCH_WITHOUT=watch_threads, for benchmarks): watchers skip the
// heartbeat check for that peer and keep the others.
inline constexpr int64_t kNoHeartbeat = -1;

// Fills `mine`'s pid and pid namespace, so that a peer waiting on this rank
// sees it exit from the moment it mapped the segment, before its heartbeat
// starts (group creation connects TCP in between).
void ClaimLivenessRecord(LivenessRecord* mine);

// The inode of /proc/self/ns/pid: pids mean something only within one.
uint64_t ThisPidNamespace();

// Fills `mine` for this process and has the heartbeat thread advance it
// until StopHeartbeat. `mine` must stay mapped until then.
void StartHeartbeat(LivenessRecord* mine);
// Fills `mine` for this process with kNoHeartbeat: no thread advances it.
void ClaimWithoutHeartbeat(LivenessRecord* mine);
void StopHeartbeat(LivenessRecord* mine);

// Why a peer cannot answer (PeerWatch::Gone).
struct PeerGone {
  // The process is gone or a zombie: it runs no more code, so it copies
  // nothing more. False for a missing heartbeat (frozen: it may go on).
  // Callers branch on this, never on `why`'s wording.
  bool exited = false;
  // For messages: "(pid 12) exited", "(pid 12) exited (a zombie not yet
  // reaped)", "(pid 12) has shown no heartbeat for 61s (...)".
  std::string why;
};

// One watcher's view of one peer, kept across waits.
class PeerWatch {
 public:
  // Why the peer cannot answer, or nullopt while it may. Cheap enough to
  // call every few milliseconds of a wait.
  std::optional<PeerGone> Gone(const LivenessRecord& peer);

 private:
  int64_t last_beat_ = -1;
  absl::Time beat_seen_changing_;  // watcher time of the last change seen
  absl::Time last_look_;
};

// Whether the peer's process is stopped (SIGSTOP, a tty stop, a debugger):
// every one of its threads in /proc state T or t, so that none of them runs
// code until it is continued. False for a running, runnable or sleeping
// process, an exited one, one whose threads cannot be read, and one in
// another pid namespace (its pid means nothing here).
bool PeerStopped(const LivenessRecord& peer);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_PEER_LIVENESS_H_
