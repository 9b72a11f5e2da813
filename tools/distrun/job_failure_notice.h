// How distrun tells a job that one of its ranks died: the failure goes into
// the job's store (cc/store/job_failure.h), where every rank's blocked store
// call (rendezvous, address exchange, the shared-memory attach, a barrier
// through the store) ends at once with it. Node 0 writes into the store it
// hosts; another node connects to node 0's store for the one write. Given to
// the rank supervisor as on_rank_failed, with kJobFailureNoticePeriod before
// the SIGTERM, so that ranks report the failure themselves.

#ifndef DISTKIT_TOOLS_DISTRUN_JOB_FAILURE_NOTICE_H_
#define DISTKIT_TOOLS_DISTRUN_JOB_FAILURE_NOTICE_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "cc/store/store_server.h"
#include "tools/distrun/rank_supervisor.h"

namespace distkit {

// Long enough for a rank that lost a peer to print its error and exit,
// short enough that a rank blocked elsewhere is stopped soon. Such a rank
// first waits up to 1 s for this very record (cc/group/process_group.cc,
// kRecordWait), which may never come where node 0's store has closed: with
// a notice of 1 s as well, its SIGTERM came first in about 1 of 8 loaded
// runs of netns_failures_test ("killed leader"), and it never reported.
inline constexpr absl::Duration kJobFailureNoticePeriod = absl::Seconds(2);

// The on_rank_failed of node `node_rank`: `server` on node 0 (the store it
// hosts), else null and the store at `store_address` with `token`. Where a
// notice could not even connect, `*unreached` (if given; it must outlive
// the callback) becomes true: node 0's store is gone or cut off, which the
// node's later report to it (exit_barrier.h) need not wait long to learn.
std::function<void(const std::string&, const SupervisorSay&)> JobFailureNotice(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, std::atomic<bool>* unreached = nullptr);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_JOB_FAILURE_NOTICE_H_
