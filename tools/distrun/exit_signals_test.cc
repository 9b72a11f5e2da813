#include "tools/distrun/exit_signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "gtest/gtest.h"

namespace distkit {
namespace {

// Runs `body` in a child process (signals there stay there) and returns its
// wait status.
int InChild(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// A signal that came before the last look is the exit code, 128 + signal.
TEST(ExitSignalsTest, ASignalBeforeTheLastLookIsTheExitCode) {
  const int status = InChild([] {
    BlockExitSignals();
    raise(SIGTERM);
    ExitSignals signals;
    return signals.Final(0, "in the test");
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

// One that comes after the last look, before the exit, is not dropped: it
// ends the process by its default action. (A handler that set a flag
// checked before exit made such a process exit 0.)
TEST(ExitSignalsTest, ASignalAfterTheLastLookEndsTheProcess) {
  const int status = InChild([] {
    BlockExitSignals();
    ExitSignals signals;
    const int code = signals.Final(0, "in the test");
    raise(SIGINT);  // between the last look and _exit
    return code;
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

// A failure's code stays the result, whatever comes after.
TEST(ExitSignalsTest, AFailureStaysTheResult) {
  const int status = InChild([] {
    BlockExitSignals();
    raise(SIGTERM);
    ExitSignals signals;
    const int code = signals.Final(7, "in the test");
    raise(SIGINT);
    return code;
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

// Came() takes a pending signal and keeps the first.
TEST(ExitSignalsTest, CameTakesAPendingSignalAndKeepsTheFirst) {
  const int status = InChild([] {
    BlockExitSignals();
    ExitSignals signals;
    if (signals.Came()) return 1;
    raise(SIGTERM);
    if (!signals.Came() || signals.signal() != SIGTERM) return 2;
    raise(SIGINT);
    if (!signals.Came() || signals.signal() != SIGTERM) return 3;
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGINT)) return 4;  // taken, not left
    return signals.Apply(0, "in the test") == 128 + SIGTERM ? 0 : 5;
  });
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// SIGHUP and SIGQUIT are taken as SIGINT and SIGTERM are (a SIGHUP killed
// distrun outright); ignored, as under nohup, they stay ignored.
TEST(ExitSignalsTest, SighupAndSigquitAreTakenUnlessIgnored) {
  for (int sig : {SIGHUP, SIGQUIT}) {
    int status = InChild([sig] {
      BlockExitSignals();
      ExitSignals signals;
      raise(sig);
      return signals.Apply(0, "in the test") == 128 + sig ? 0 : 1;
    });
    ASSERT_TRUE(WIFEXITED(status)) << sig << ": " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << sig;
    status = InChild([sig] {
      signal(sig, SIG_IGN);
      BlockExitSignals();
      ExitSignals signals;
      raise(sig);
      return signals.Came() ? 1 : signals.Final(0, "in the test");
    });
    ASSERT_TRUE(WIFEXITED(status)) << sig << ": " << status;
    EXPECT_EQ(WEXITSTATUS(status), 0) << sig;
  }
}

}  // namespace
}  // namespace distkit
