#include "tools/distrun/exit_signals.h"

#include <signal.h>
#include <string.h>
#include <time.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tools/distrun/output_sink.h"

namespace distkit {
namespace {

// SIGINT, SIGTERM, SIGHUP and SIGQUIT, as the rank supervisor forwards
// them; SIGHUP or SIGQUIT ignored (nohup) stays ignored.
sigset_t ExitSignalSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction old;
    sigaction(sig, nullptr, &old);
    if (sig != SIGINT && sig != SIGTERM && old.sa_handler == SIG_IGN) continue;
    sigaddset(&set, sig);
  }
  return set;
}

}  // namespace

void BlockExitSignals() {
  const sigset_t set = ExitSignalSet();
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

bool ExitSignals::Came() {
  const sigset_t set = ExitSignalSet();
  const timespec now = {0, 0};
  int sig;
  while ((sig = sigtimedwait(&set, nullptr, &now)) > 0) {
    if (signal_ == 0) signal_ = sig;
  }
  return signal_ != 0;
}

int ExitSignals::Apply(int code, absl::string_view when) {
  if (code != 0 || !Came()) return code;
  // Bounded as distrun's other messages once its ranks are gone: signals
  // are blocked here, so none would end a write to a stalled reader.
  WriteWithin(2,
              absl::StrCat("distrun: received signal ", signal_, " (",
                           strsignal(signal_), ") ", when, "\n"),
              absl::Seconds(10));
  return 128 + signal_;
}

int ExitSignals::Final(int code, absl::string_view when) {
  code = Apply(code, when);
  if (code != 0) return code;
  // Nothing is pending (Apply took it): from here a signal acts at once.
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  const sigset_t set = ExitSignalSet();
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    if (sigismember(&set, sig)) sigaction(sig, &sa, nullptr);
  }
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  return code;
}

}  // namespace distkit
