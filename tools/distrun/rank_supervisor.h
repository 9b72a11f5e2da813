// RankSupervisor runs the processes of one node's ranks and watches them, the
// machinery shared by distrun and the multi-rank test harness:
// - every line a rank writes to stdout / stderr is forwarded with a
//   "[rank<N>]: " prefix (and kept raw in <log_dir>/rank_<N>.log if asked),
//   queued where the reader is slow (output_sink.h): a reader that stops
//   reading holds the ranks (their pipes fill) but never the supervisor,
//   whose timeout, signals and failure handling go on; once the ranks are
//   gone a reader that pauses still gets everything, except where the job
//   was stopped (timeout, signal): then one that takes nothing for 10 s
//   gets no more;
// - when a rank fails (non-zero exit or a signal), the others are stopped:
//   SIGTERM to each rank's process group, then SIGKILL after a grace period;
//   the result is that rank's exit code, and the message names it. With
//   on_rank_failed (distrun: the job's store is told, job_failure_notice.h),
//   the SIGTERM waits notice_period, so that ranks blocked on the dead one
//   end by themselves with an error naming it;
// - with `replace` (distrun --max-replacements), a failed rank may instead
//   be started again alone: same rank, same environment plus
//   DISTKIT_REPLACEMENT=<n>, the others untouched; with `release` (distrun
//   --min-ranks), the job may instead go on without a rank that was killed;
// - SIGINT / SIGTERM / SIGHUP / SIGQUIT sent to the supervisor are forwarded
//   to every rank's process group (one that comes once they have all ended
//   is still the result; one that comes while the ranks start stops the
//   start: the ranks not started yet never are); SIGHUP or SIGQUIT ignored
//   when it starts (nohup) stays ignored;
// - when several ranks end between two looks, the one blamed is one killed
//   by a signal before one that exited with an error (often its peer, which
//   lost it), then the lowest rank;
// - an overall timeout (counted from the start of the launch) stops every
//   rank and returns 124, naming the ranks that were still running; a failure
//   or signal that came first stays the result, and a stop already under way
//   keeps its notice period.
// - each rank runs in a process group of its own with stdin from /dev/null
//   (a rank in a background group reading a terminal was stopped by
//   SIGTTIN); a rank stopped anyway is reported, and the SIGTERM that stops
//   the job comes with a SIGCONT; it inherits no descriptor above stderr
//   (as torchrun's workers);
// - ranks die with the supervisor: the kernel kills each rank when it dies
//   (PR_SET_PDEATHSIG), and a small watcher process it starts kills each
//   rank's whole process group then, even after a SIGKILL of the supervisor
//   (what a rank started keeps no GPU or port; what left the rank's group,
//   setsid or setpgid, is not followed). When a rank ends, its group is
//   killed;
// - SIGCHLD is set to its default while the ranks run (one ignored, e.g.
//   inherited across exec, made the kernel reap the ranks unseen and the job
//   hang), for the ranks too; a rank whose end cannot be waited for still
//   counts as ended, as a failure.

#ifndef DISTKIT_TOOLS_DISTRUN_RANK_SUPERVISOR_H_
#define DISTKIT_TOOLS_DISTRUN_RANK_SUPERVISOR_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace distkit {

struct RankProcess {
  int rank = 0;
  std::vector<std::string> argv;  // argv[0] is looked up on PATH
  std::vector<std::string> env;   // "NAME=value", the whole environment
  int cpu = -1;                   // the only CPU it may run on; -1: any
};

// How a callback below says something on stderr ("could not reach the
// store"): through the supervisor's queue (program_name is prefixed), in
// order with the ranks' output and never blocking distrun on a reader that
// stopped reading, as a direct write to stderr could.
using SupervisorSay = std::function<void(absl::string_view)>;

struct SupervisorOptions {
  // Zero means no limit.
  absl::Duration timeout = absl::ZeroDuration();
  // Between SIGTERM and SIGKILL when stopping ranks.
  absl::Duration grace_period = absl::Seconds(5);
  // When non-empty, each rank's raw output also goes to <log_dir>/rank_<N>.log
  // (the directory and its parents are made; one that cannot be, or a log
  // that cannot be opened, fails the job before that rank starts).
  std::string log_dir;
  // Where the supervisor's own messages go ("distrun: ...").
  std::string program_name = "distrun";
  // Called once, with what happened ("rank 2 (pid 41) was killed by signal
  // 9 (Killed)"), when the first rank fails, before the others are stopped.
  std::function<void(const std::string&, const SupervisorSay&)> on_rank_failed;
  // After on_rank_failed, how long the others have to end by themselves
  // before their SIGTERM.
  absl::Duration notice_period = absl::ZeroDuration();
  // Asked first when a rank fails while the job runs (not once it is being
  // stopped): a number n > 0 starts that rank again at once, with
  // DISTKIT_REPLACEMENT=<n> in its environment (its log file is appended
  // to); 0 stops the job as above. Unset: never replaced.
  std::function<int(const std::string&, const SupervisorSay&)> replace;
  // Asked when a rank killed by a signal is not replaced: true lets the job
  // go on without it (its death neither stops the others nor counts in the
  // result); false stops the job. Unset: stop. A rank that exits with an
  // error code is never released: its own program failed.
  std::function<bool(const std::string&, const SupervisorSay&)> release;
};

// The exit code of the supervised job.
inline constexpr int kTimeoutExitCode = 124;

// Makes `path` and its missing parents (mkdir -p); an error names the
// directory that could not be made.
absl::Status MakeDirectories(const std::string& path);

// Runs `ranks` to completion and returns the job's exit code: 0 when every
// rank exits 0; otherwise the first failing rank's code (128 + signal for a
// rank killed by a signal); 124 on timeout; 128 + signal when the supervisor
// itself was interrupted; 1 when the log directory cannot be made; 127 when a
// rank cannot be started (nor its log opened). Call at most once per process
// (it installs handlers for SIGINT, SIGTERM, SIGHUP and SIGQUIT), with those
// blocked in every other thread: it blocks them too, and takes them only while
// it waits for output, so that none is lost between its last look and its
// return. On return the caller's handlers and signal mask are back; a signal
// that came after its last look is pending for the caller (delivered at once
// unless blocked).
int SuperviseRanks(const std::vector<RankProcess>& ranks,
                   const SupervisorOptions& options);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_RANK_SUPERVISOR_H_
