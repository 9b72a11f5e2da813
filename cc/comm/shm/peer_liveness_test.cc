// PeerWatch says whether a peer exited as a flag, not in words; PeerStopped
// whether it is stopped.

#include "cc/comm/shm/peer_liveness.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// Read once per process, at the first look of any test: set before main.
[[maybe_unused]] const bool kShortHeartbeatTimeout =
    setenv("DISTKIT_HEARTBEAT_TIMEOUT", "0.1", 1) == 0;

TEST(PeerLivenessTest, ExitedPeerIsFlaggedExited) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  LivenessRecord record;
  record.pid_namespace.store(ThisPidNamespace());
  record.pid.store(child);
  record.heartbeat.store(1);
  std::optional<PeerGone> gone = PeerWatch().Gone(record);
  ASSERT_TRUE(gone.has_value());
  EXPECT_TRUE(gone->exited) << gone->why;
}

TEST(PeerLivenessTest, ZombieIsFlaggedExited) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  LivenessRecord record;
  record.pid_namespace.store(ThisPidNamespace());
  record.pid.store(child);
  record.heartbeat.store(1);
  std::optional<PeerGone> gone;
  for (int i = 0; i < 1000 && !gone; ++i) {  // until it has exited
    gone = PeerWatch().Gone(record);
    if (!gone) absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE(gone.has_value());
  EXPECT_TRUE(gone->exited) << gone->why;
  waitpid(child, nullptr, 0);
}

TEST(PeerLivenessTest, SilentHeartbeatIsNotExited) {
  LivenessRecord record;
  ClaimLivenessRecord(&record);  // this process: alive
  record.heartbeat.store(5);     // and never advancing
  PeerWatch watch;
  EXPECT_FALSE(watch.Gone(record).has_value());
  std::optional<PeerGone> gone;
  for (int i = 0; i < 100 && !gone; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    gone = watch.Gone(record);
  }
  ASSERT_TRUE(gone.has_value());
  EXPECT_FALSE(gone->exited) << gone->why;
}

TEST(PeerLivenessTest, LivePeerIsNotGone) {
  LivenessRecord record;
  ClaimLivenessRecord(&record);
  record.heartbeat.store(kNoHeartbeat);
  EXPECT_FALSE(PeerWatch().Gone(record).has_value());
}

// Stopped: every thread in state T (SIGSTOP); not once continued, not a
// running process, not one in another pid namespace.
TEST(PeerLivenessTest, StoppedPeerIsStopped) {
  const pid_t child = fork();
  if (child == 0) {
    while (true) pause();
  }
  ASSERT_GT(child, 0);
  LivenessRecord record;
  record.pid_namespace.store(ThisPidNamespace());
  record.pid.store(child);
  record.heartbeat.store(kNoHeartbeat);
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(wstatus));
  EXPECT_TRUE(PeerStopped(record));
  record.pid_namespace.store(ThisPidNamespace() + 1);
  EXPECT_FALSE(PeerStopped(record));
  record.pid_namespace.store(ThisPidNamespace());
  ASSERT_EQ(kill(child, SIGCONT), 0);
  ASSERT_EQ(waitpid(child, &wstatus, WCONTINUED), child);
  bool stopped = true;
  for (int i = 0; i < 1000 && stopped; ++i) {  // until /proc shows it
    stopped = PeerStopped(record);
    if (stopped) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_FALSE(stopped);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);

  LivenessRecord me;
  ClaimLivenessRecord(&me);
  EXPECT_FALSE(PeerStopped(me));
}

}  // namespace
}  // namespace distkit
