#include "tools/distrun/exit_signals.h"

#include <signal.h>
#include <string.h>
#include <time.h>

#include <iostream>

namespace distkit {
namespace {

sigset_t IntTerm() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

void BlockExitSignals() {
  const sigset_t set = IntTerm();
  sigprocmask(SIG_BLOCK, &set, nullptr);
}

bool ExitSignals::Came() {
  const sigset_t set = IntTerm();
  const timespec now = {0, 0};
  int sig;
  while ((sig = sigtimedwait(&set, nullptr, &now)) > 0) {
    if (signal_ == 0) signal_ = sig;
  }
  return signal_ != 0;
}

int ExitSignals::Apply(int code, absl::string_view when) {
  if (code != 0 || !Came()) return code;
  std::cerr << "distrun: received signal " << signal_ << " ("
            << strsignal(signal_) << ") " << when << "\n";
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
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const sigset_t set = IntTerm();
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  return code;
}

}  // namespace distkit
