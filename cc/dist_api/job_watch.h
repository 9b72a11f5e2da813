// JobWatch: a rank's check that the job it joined still exists, so that no
// rank outlives its job. A thread of its own looks once a second at:
//  - the launcher that started this rank (torchrun, srun, mpirun, named by
//    their variables), by pid: when the rank's parent changes, the launcher
//    has died. distrun's ranks need no such watch (PR_SET_PDEATHSIG);
//  - the job's store, when another process hosts it (rank 0, or distrun): a
//    store that has not answered for DISTKIT_STORE_HEARTBEAT_TIMEOUT seconds
//    (default 60; 0 turns this watch off) without having announced that it
//    closes is taken for a dead host.
// Either ends the rank as a launcher stopping a job would: `on_lost` first
// (dist aborts its groups there, so blocked collectives return), a message on
// stderr naming what vanished, then SIGTERM to itself (a handler can still
// save what it must).
//
// A store host that leaves normally announces it (AnnounceStoreClosing), so
// ranks still working after rank 0 has finished are not stopped.

#ifndef DISTKIT_CC_DIST_API_JOB_WATCH_H_
#define DISTKIT_CC_DIST_API_JOB_WATCH_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cc/store/store.h"

namespace distkit {
namespace dist {

// Set by a store host that closes normally; watchers stop watching the store.
inline constexpr char kStoreClosingKey[] = "distkit/store_closing";
// Counted up by each rank that leaves normally; the host waits for them.
inline constexpr char kRanksLeftKey[] = "distkit/ranks_left";

class JobWatch {
 public:
  struct Options {
    // The store to ping; null: the store is this process's own.
    std::shared_ptr<Store> store;
    std::string store_address;  // for the message
    absl::Duration store_timeout = absl::Seconds(60);
    // The launcher's pid (this process's parent); 0: not watched.
    pid_t launcher_pid = 0;
    std::string launcher_name;  // "torchrun", "srun", "mpirun"
    absl::Duration interval = absl::Seconds(1);
    std::function<void(const absl::Status&)> on_lost;
  };

  // The options this rank's environment asks for: the launcher from its
  // variables (DISTKIT_LAUNCHER_WATCH=0 / 1 turns that off / on for any
  // parent), the store timeout from DISTKIT_STORE_HEARTBEAT_TIMEOUT.
  static Options FromEnvironment(std::shared_ptr<Store> remote_store,
                                 std::string store_address);

  // Starts the thread; null when there is nothing to watch.
  static std::unique_ptr<JobWatch> Start(Options options);

  // Stops and joins the thread (at most one ping's deadline).
  ~JobWatch();

  // Whether the store's host announced that it closes.
  bool store_closing() const;

 private:
  explicit JobWatch(Options options) : options_(std::move(options)) {}
  void Run();
  // The status for on_lost, or OK while the job is there.
  absl::Status Look(absl::Time& last_answer);

  const Options options_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool store_closing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// For the process that hosts the store, as it shuts down normally: sets
// kStoreClosingKey in `host_state` and waits until the other `others` ranks
// have left (kRanksLeftKey) or their watches have had one interval to see
// it, whichever comes first.
void AnnounceStoreClosing(Store& host_state, int others,
                          absl::Duration interval = absl::Seconds(1));

// For a rank leaving normally whose store is remote: counts itself out
// (bounded; a store already gone is fine).
void CountRankLeft(Store& store);

}  // namespace dist
}  // namespace distkit

#endif  // DISTKIT_CC_DIST_API_JOB_WATCH_H_
