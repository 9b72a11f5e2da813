// The exit barrier of a job on several nodes: node 0 hosts the store, so it
// must not close it while another node's ranks still use it (a rank's last
// store calls, its group teardown). Each other node reports through the
// store that its ranks are done; node 0 waits for every report (bounded)
// before it shuts the store down. As torchrun's agents do, only after a
// successful run: after a failure the job is ending with an error anyway.
// Once a failure is recorded in the store (cc/store/job_failure.h: a rank
// died on another node), node 0's wait ends at once with that failure and
// it closes the store: the other nodes' ranks are being stopped too.

#ifndef DISTKIT_TOOLS_DISTRUN_EXIT_BARRIER_H_
#define DISTKIT_TOOLS_DISTRUN_EXIT_BARRIER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace distkit {

// How long a node's report may take, handshake included. Node 0's store
// answers at once unless it is gone or unreachable (a cut link), and this
// node's exit should not wait long for it; a busy host may take a second.
inline constexpr absl::Duration kReportTimeout = absl::Seconds(5);
// The bound instead where the node could not connect to node 0's store
// moments before (its failure notice, job_failure_notice.h): a second try
// of a store that just did not answer, not another 5 s of the node's exit.
inline constexpr absl::Duration kReportAfterUnreached = absl::Seconds(2);

struct ExitBarrierOptions {
  std::string store_address;  // host:port of node 0's store
  std::string token;
  int nnodes = 1;
  int node_rank = 0;
  absl::Duration timeout = absl::Seconds(300);
  // Node > 0: the bound of ReportNodeDone.
  absl::Duration report_timeout = kReportTimeout;
  // Node 0: asked every moment while it waits; true ends the wait at once
  // with CANCELLED (distrun: a SIGINT, SIGTERM, SIGHUP or SIGQUIT came).
  std::function<bool()> cancelled;
};

// The store key a node's report is written to (its value: the node's exit
// code).
std::string ExitBarrierKey(int node_rank);

// Node > 0: reports that this node's ranks ended with `exit_code()`. The
// code is asked for once node 0's store has answered (connecting can wait
// on it), just before it is written, so a signal that came meanwhile is in
// it. An unreachable store is not an error of the run (node 0 may be gone
// after a failure); the status says why the report was not written.
absl::Status ReportNodeDone(const ExitBarrierOptions& options,
                            const std::function<int()>& exit_code);

// What the other nodes reported: the lowest node rank with a non-zero exit
// code, and that code; {0, 0} when every one reported 0.
struct NodeReports {
  int failed_node = 0;
  int exit_code = 0;
};

// Node 0: waits until every other node has reported, and reads what they
// reported (so that node 0's exit, the job's, is not 0 where another node's
// was not). DEADLINE_EXCEEDED names the nodes that did not report within the
// timeout; CANCELLED when `cancelled` said so first.
absl::StatusOr<NodeReports> WaitForNodes(const ExitBarrierOptions& options);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_EXIT_BARRIER_H_
