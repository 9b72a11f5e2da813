// DISTKIT_BENCH_WITHOUT: for benchmarks only, turns safety features off so
// that their cost per operation can be measured against the same path with
// them (tools/dkbench/safety_bench.py). A comma-separated list of:
//   flight_recorder  no record of the group's operations (flight_recorder.h):
//                    a failure dumps nothing about them;
//   watch_threads    no JobWatch thread (cc/dist_api/job_watch.h) and no
//                    shared-memory heartbeat (cc/comm/shm/peer_liveness.h):
//                    a dead launcher or store host, or a frozen same-host
//                    peer, is no longer noticed (a peer that exits still is);
//   agreement        no signature exchange where it is a step of its own
//                    (Backend::AgreementSkippable: over TCP, payloads above
//                    the inline limit): ranks that call different
//                    operations get wrong data or hang instead of an error.
// Read when a group is created (and, for the JobWatch, at init); never set by
// distkit itself, and a process that has it set says so once on stderr.
// Unset or empty: everything on.

#ifndef DISTKIT_CC_CORE_BENCH_WITHOUT_H_
#define DISTKIT_CC_CORE_BENCH_WITHOUT_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distkit {

struct BenchWithout {
  bool flight_recorder = false;
  bool watch_threads = false;
  bool agreement = false;

  bool any() const { return flight_recorder || watch_threads || agreement; }
};

// Parses the variable's value; an unknown word is INVALID_ARGUMENT.
absl::StatusOr<BenchWithout> ParseBenchWithout(absl::string_view spec);

// DISTKIT_BENCH_WITHOUT, read now, with the one-time warning on stderr when
// it turns anything off.
absl::StatusOr<BenchWithout> BenchWithoutFromEnvironment();

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_BENCH_WITHOUT_H_
