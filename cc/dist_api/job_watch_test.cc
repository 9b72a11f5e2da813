// No rank outlives its job: ranks started by a launcher (torchrun's
// variables) that is killed, and ranks whose store host (rank 0) is killed,
// are stopped within the heartbeat timeout; a store host that leaves
// normally stops nobody. Real processes: this binary re-executed as ranks.

#include "cc/dist_api/job_watch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/dist_api/dist.h"
#include "gtest/gtest.h"

namespace distkit {
namespace dist {
namespace {

bool CanBind(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok =
      bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// A free port whose next one is free too (under torchrun's variables the
// store takes MASTER_PORT + 1), drawn from 20000-32000 as
// testing/free_port_pair.py does: below Linux's ephemeral range (32768 and
// up), where connecting sockets and Gloo's listeners take theirs while a
// job starts, and could take the one picked here before rank 0 binds it.
int FreePortPair() {
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 31998);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(random);
    if (CanBind(port) && CanBind(port + 1)) return port;
  }
  ADD_FAILURE() << "no free pair of ports in 20000-32000 after 200 tries";
  return 20000;
}

// Where rank `rank` of the job on `port` leaves its mark once InitDist has
// returned (the rank joined, and its job watch runs).
std::string JoinedFile(int port, int rank) {
  const char* dir = getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/job_watch_joined.", port,
                      ".", rank);
}

// Starts this binary as rank `rank` of 2 ("--rank SECONDS": init, its
// JoinedFile, then idle for SECONDS outside any collective, then a normal
// shutdown).
pid_t StartRank(int rank, int port, double idle_seconds,
                const std::vector<std::string>& extra_env = {}) {
  const std::string joined = JoinedFile(port, rank);
  unlink(joined.c_str());
  pid_t pid = fork();
  if (pid == 0) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("DISTKIT_STORE_HEARTBEAT_TIMEOUT", "2", 1);
    setenv("JOB_WATCH_TEST_JOINED", joined.c_str(), 1);
    for (const std::string& kv : extra_env) putenv(strdup(kv.c_str()));
    const std::string idle = absl::StrCat(idle_seconds);
    execl("/proc/self/exe", "job_watch_test", "--rank", idle.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits until both ranks of the job on `port` have joined (their
// JoinedFile): a fixed sleep lost to a loaded machine, and a kill before
// the join tests init's failure, not the job watch. The bound is a hang
// guard past init's own (10 s, RankMain).
bool BothJoined(int port) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (access(JoinedFile(port, 0).c_str(), F_OK) != 0 ||
         access(JoinedFile(port, 1).c_str(), F_OK) != 0) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

struct Ended {
  bool ended = false;
  int status = 0;
  absl::Duration after;
};

// Waits up to `limit` for `pid` (a child, or an orphan this subreaper
// adopted) to end.
Ended WaitFor(pid_t pid, absl::Duration limit) {
  const absl::Time start = absl::Now();
  Ended e;
  while (absl::Now() - start < limit) {
    pid_t got = waitpid(pid, &e.status, WNOHANG);
    if (got == pid) {
      e.ended = true;
      e.after = absl::Now() - start;
      return e;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &e.status, 0);
  return e;
}

bool StoppedBySigterm(const Ended& e) {
  return e.ended && WIFSIGNALED(e.status) && WTERMSIG(e.status) == SIGTERM;
}

// Rank 0 hosts the store; killing it leaves rank 1 idle between
// collectives, with nobody to tell it. The heartbeat (2 s here) stops it.
TEST(JobWatchTest, RankStopsWhenItsStoreHostIsKilled) {
  const int port = FreePortPair();
  pid_t r0 = StartRank(0, port, 60);
  pid_t r1 = StartRank(1, port, 60);
  if (!BothJoined(port)) {
    kill(r0, SIGKILL);
    kill(r1, SIGKILL);
    FAIL() << "the ranks did not both join within 30 s: "
           << WaitFor(r0, absl::ZeroDuration()).status << " "
           << WaitFor(r1, absl::ZeroDuration()).status;
  }
  ASSERT_EQ(kill(r0, SIGKILL), 0);  // both joined and idle
  WaitFor(r0, absl::Seconds(5));
  Ended e = WaitFor(r1, absl::Seconds(10));
  EXPECT_TRUE(StoppedBySigterm(e))
      << "rank 1 outlived its store host: ended=" << e.ended
      << " status=" << e.status;
  EXPECT_LT(e.after, absl::Seconds(8));
}

// Rank 0 finishes first and leaves normally; rank 1 keeps working past the
// heartbeat timeout and must finish its own work undisturbed.
TEST(JobWatchTest, StoreHostLeavingNormallyStopsNobody) {
  const int port = FreePortPair();
  pid_t r0 = StartRank(0, port, 0.5);
  pid_t r1 = StartRank(1, port, 5);
  Ended e0 = WaitFor(r0, absl::Seconds(20));
  Ended e1 = WaitFor(r1, absl::Seconds(20));
  ASSERT_TRUE(e0.ended && e1.ended);
  EXPECT_TRUE(WIFEXITED(e0.status) && WEXITSTATUS(e0.status) == 0) << e0.status;
  EXPECT_TRUE(WIFEXITED(e1.status) && WEXITSTATUS(e1.status) == 0)
      << "rank 1 was stopped although rank 0 left normally: " << e1.status;
}

// Ranks started by a launcher (torchrun's variables) that is SIGKILLed are
// orphaned; each sees its parent change and stops.
TEST(JobWatchTest, RanksStopWhenTheirLauncherIsKilled) {
  // Orphans are adopted by this process, so it can wait for them.
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  const int port = FreePortPair();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    std::vector<std::string> env = {"TORCHELASTIC_RUN_ID=job_watch_test",
                                    "DISTKIT_STORE_HEARTBEAT_TIMEOUT=0"};
    pid_t a = StartRank(0, port, 60, env);
    pid_t b = StartRank(1, port, 60, env);
    dprintf(pipe_fds[1], "%d %d\n", a, b);
    for (;;) pause();
  }
  close(pipe_fds[1]);
  char line[64] = {};
  FILE* from = fdopen(pipe_fds[0], "r");
  ASSERT_NE(fgets(line, sizeof(line), from), nullptr);
  fclose(from);
  int a = 0, b = 0;
  ASSERT_EQ(sscanf(line, "%d %d", &a, &b), 2);
  // Killed before they joined, the ranks would take this process (the
  // subreaper) for their launcher, and watch it instead.
  if (!BothJoined(port)) {
    for (pid_t pid : {a, b, launcher}) kill(pid, SIGKILL);
    // The ranks are this process's (the subreaper's) once it is gone.
    for (pid_t pid : {launcher, a, b}) waitpid(pid, nullptr, 0);
    FAIL() << "the ranks did not both join within 30 s";
  }
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  waitpid(launcher, nullptr, 0);
  for (pid_t rank : {a, b}) {
    Ended e = WaitFor(rank, absl::Seconds(8));
    EXPECT_TRUE(StoppedBySigterm(e))
        << "rank pid " << rank << " outlived its launcher: ended=" << e.ended
        << " status=" << e.status;
    EXPECT_LT(e.after, absl::Seconds(4));
  }
}

int RankMain(double idle_seconds) {
  InitOptions options;
  options.timeout = absl::Seconds(10);
  absl::Status s = InitDist("pytorch", options);
  if (!s.ok()) {
    std::fprintf(stderr, "init: %s\n", s.ToString().c_str());
    return 3;
  }
  if (const char* joined = getenv("JOB_WATCH_TEST_JOINED")) {
    const int fd = open(joined, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return 4;
    close(fd);
  }
  absl::SleepFor(absl::Seconds(idle_seconds));
  DestroyDist();
  return 0;
}

}  // namespace
}  // namespace dist
}  // namespace distkit

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--rank") {
    double idle = 0;
    if (!absl::SimpleAtod(argv[2], &idle)) return 2;
    return distkit::dist::RankMain(idle);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
