// SIGINT, SIGTERM, SIGHUP and SIGQUIT (the last two unless ignored, as under
// nohup) in distrun outside SuperviseRanks (which takes them while its ranks
// run, rank_supervisor.h): blocked from the start, in every
// thread, with no handler; distrun takes a pending one where it looks (the
// exit barrier, before node > 0 reports, before it exits). A handler that
// only set a flag lost a signal that came after the flag's last check: the
// process went on to exit 0 having caught it.

#ifndef DISTKIT_TOOLS_DISTRUN_EXIT_SIGNALS_H_
#define DISTKIT_TOOLS_DISTRUN_EXIT_SIGNALS_H_

#include "absl/strings/string_view.h"

namespace distkit {

// Blocks those signals in the calling thread and so in the threads it
// starts. Call first in main.
void BlockExitSignals();

class ExitSignals {
 public:
  // Takes a pending one of those signals, if any (the first one taken is kept);
  // true once one came.
  bool Came();

  // The signal that came first; 0 if none.
  int signal() const { return signal_; }

  // `code`, or 128 + the signal where `code` is 0 and one came (said on
  // stderr, `when` it came).
  int Apply(int code, absl::string_view when);

  // The last look before exit: Apply, and where the result is still 0,
  // those signals get their default action and are unblocked, so that
  // one that comes from now on ends the process by that signal (exit status
  // 128 + signal in a shell) instead of being dropped at exit. A non-zero
  // result (a failure, or a signal already taken) stays as it is.
  int Final(int code, absl::string_view when);

 private:
  int signal_ = 0;
};

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_EXIT_SIGNALS_H_
