// How long a same-host wait keeps its core before it sleeps.
//
// A waiting rank first spins, then yields (sched_yield) for up to 20 ms,
// then sleeps on a futex the last arrival wakes. DISTKIT_SHM_WAIT=sleep
// makes waits sleep as soon as their short spin is over: for a host whose
// cores are wanted by other work while ranks wait. It is not the default,
// even with more ranks than cores: measured with two ranks per core (world
// size 4 on 2 cores), sleeping at once made 4 B - 4 KiB collectives 3.5-4x
// slower (a woken rank waits for its virtual CPU), and 512 ranks starting
// on 2 cores took 1.45-1.74 s to their first all_reduce against 1.24-1.34 s
// (tools/dkbench/RESULTS.md, "Waiting when ranks outnumber cores").

#ifndef DISTKIT_CC_COMM_SHM_WAIT_POLICY_H_
#define DISTKIT_CC_COMM_SHM_WAIT_POLICY_H_

#include "absl/time/time.h"

namespace distkit {

// How long a wait yields (after its pure spins) before sleeping: 20 ms, or
// none under DISTKIT_SHM_WAIT=sleep ("yield", the default, keeps 20 ms).
absl::Duration ShmYieldPhase();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_WAIT_POLICY_H_
