// Command line of distrun:
//
//   distrun --nproc-per-node N [--nnodes M --node-rank I]
//           [--master-addr A] [--master-port P] [--log-dir D]
//           [--timeout SECONDS] [--grace-period SECONDS]
//           [--exit-barrier-timeout SECONDS]
//           [--cpu-bind none|core] [--max-replacements K] [--min-ranks M]
//           -- program args... [: program2 args... ...]
//
// Flags accept "--flag value" and "--flag=value", with '-' or '_' in names
// (torchrun spells them both ways). After "--", either one program runs on
// every rank, or one program per local rank separated by ":" (an MPMD job,
// e.g. ranks written in different languages).

#ifndef DISTKIT_TOOLS_DISTRUN_DISTRUN_OPTIONS_H_
#define DISTKIT_TOOLS_DISTRUN_DISTRUN_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace distkit {

struct DistrunOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: pick a free port (single node only)
  std::string log_dir;
  absl::Duration timeout = absl::ZeroDuration();
  absl::Duration grace_period = absl::Seconds(5);
  // With several nodes, how long node 0 keeps the store for the others'
  // ranks after its own succeeded (tools/distrun/exit_barrier.h); torchrun's
  // default.
  absl::Duration exit_barrier_timeout = absl::Seconds(300);
  // --cpu-bind core: local rank i runs on the i-th CPU distrun may use, as
  // mpirun's default binding does for up to 2 ranks (and, like it, no
  // binding when there are more local ranks than such CPUs). Off by default:
  // a rank with several threads (data loaders, intra-op) would share one.
  bool bind_cores = false;
  // --max-replacements K: a failed rank is started again alone (the same RANK
  // and LOCAL_RANK, DISTKIT_REPLACEMENT=<n> in its environment, the others
  // untouched), at most K times in the whole job; the K+1-th failure stops
  // the job as without the flag (tools/distrun/replacement_budget.h).
  int max_replacements = 0;
  // --min-ranks M: a rank killed by a signal that is not replaced does not
  // stop the job while at least M ranks remain
  // (tools/distrun/lost_rank_budget.h); its death does not count in the
  // job's exit code. A rank that exits with an error code still stops the
  // job. 0: every failure stops the job.
  int min_ranks = 0;
  // programs.size() is 1 (every rank) or nproc_per_node (one per local rank).
  std::vector<std::vector<std::string>> programs;
};

// Parses the arguments after argv[0]. INVALID_ARGUMENT names the bad flag.
absl::StatusOr<DistrunOptions> ParseDistrunArgs(
    const std::vector<std::string>& args);

// With --nnodes > 1, node 0 hosts the store at --master-addr: a name that
// resolves to loopback here (localhost; the host's own name where
// /etc/hosts maps it to 127.0.1.1, as Debian does) is INVALID_ARGUMENT
// naming the address it resolves to. An address given as a loopback
// literal (127.0.0.1, the default, or ::1) is accepted: nodes on one host.
// ParseDistrunArgs checks it.
absl::Status CheckMasterAddress(const DistrunOptions& o);

// The usage text printed for --help and on errors.
const char* DistrunUsage();

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_DISTRUN_OPTIONS_H_
