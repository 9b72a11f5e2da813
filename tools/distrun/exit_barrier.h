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
#include "absl/time/time.h"

namespace distkit {

struct ExitBarrierOptions {
  std::string store_address;  // host:port of node 0's store
  std::string token;
  int nnodes = 1;
  int node_rank = 0;
  absl::Duration timeout = absl::Seconds(300);
  // Node 0: asked every moment while it waits; true ends the wait at once
  // with CANCELLED (distrun: a SIGINT or SIGTERM came).
  std::function<bool()> cancelled;
};

// The store key a node's report is written to (its value: the node's exit
// code).
std::string ExitBarrierKey(int node_rank);

// Node > 0: reports that this node's ranks ended with `exit_code`. An
// unreachable store is not an error of the run (node 0 may be gone after a
// failure); the status says why the report was not written.
absl::Status ReportNodeDone(const ExitBarrierOptions& options, int exit_code);

// Node 0: waits until every other node has reported. DEADLINE_EXCEEDED names
// the nodes that did not report within the timeout; CANCELLED when
// `cancelled` said so first.
absl::Status WaitForNodes(const ExitBarrierOptions& options);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_EXIT_BARRIER_H_
