// End-to-end tests of the distrun binary with rank_probe as the program.

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace {

constexpr char kDistrun[] = "tools/distrun/distrun";
constexpr char kProbe[] = "tools/distrun/rank_probe";

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
  absl::Duration elapsed;
};

// Runs distrun with `args`; `during` (if set) runs once output contains `when`.
// `during` runs once the output holds `when` `times` times (a line from
// each rank: waiting a fixed time instead loses to a loaded machine).
int Occurrences(absl::string_view text, absl::string_view what) {
  int n = 0;
  for (size_t at = text.find(what); at != absl::string_view::npos;
       at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

// A distrun started by StartDistrun whose output is not read yet.
struct Started {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout and stderr
  absl::Time start;
};

// Starts distrun with `args`; with `pipe_size` > 0 its output pipe holds
// only that much (rounded up to a page by the kernel; see OutputPipeSize).
// `in_child` (if set) runs in distrun's process just before its exec.
Started StartDistrun(std::vector<std::string> args, int pipe_size = 0,
                     std::function<void()> in_child = nullptr) {
  args.insert(args.begin(), kDistrun);
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  if (pipe_size > 0) fcntl(out[0], F_SETPIPE_SZ, pipe_size);
  Started s;
  s.start = absl::Now();
  s.pid = fork();
  if (s.pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    // Only as stdout and stderr: a copy left open in distrun went on to its
    // ranks and what they started, and kept the pipe from its end.
    if (out[1] > 2) close(out[1]);
    // As from a shell: whatever ran the test may ignore these.
    signal(SIGHUP, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    if (in_child) in_child();
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  s.out = out[0];
  return s;
}

// Reads the started distrun's output to the end and waits for it.
Result FinishDistrun(const Started& s,
                     std::function<void(pid_t)> during = nullptr,
                     const std::string& when = "", int times = 1) {
  Result r;
  char buf[4096];
  bool fired = false;
  ssize_t n;
  while ((n = read(s.out, buf, sizeof(buf))) > 0) {
    r.output.append(buf, n);
    if (during && !fired && Occurrences(r.output, when) >= times) {
      fired = true;
      during(s.pid);
    }
  }
  close(s.out);
  int status = 0;
  waitpid(s.pid, &status, 0);
  r.elapsed = absl::Now() - s.start;
  r.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// As FinishDistrun, for a distrun that may hang (the bug a test looks for):
// one still running after `limit` is killed (SIGKILL; its ranks die with
// it), and `killed` says so. `during` runs each time output comes until it
// returns true.
Result FinishDistrunWithin(
    const Started& s, absl::Duration limit, bool* killed,
    std::function<bool(pid_t, const std::string&)> during = nullptr) {
  Result r;
  *killed = false;
  bool fired = during == nullptr;
  const absl::Time deadline = s.start + limit;
  for (;;) {
    if (!*killed && absl::Now() > deadline) {
      kill(s.pid, SIGKILL);
      *killed = true;
    }
    // After the kill, what its ranks' processes still hold is not waited
    // for long.
    if (*killed && absl::Now() > deadline + absl::Seconds(10)) break;
    pollfd p = {s.out, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(s.out, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.output.append(buf, n);
    if (!fired) fired = during(s.pid, r.output);
  }
  close(s.out);
  int status = 0;
  waitpid(s.pid, &status, 0);
  r.elapsed = absl::Now() - s.start;
  r.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// The numbers that follow `key` on the lines of `output`.
std::vector<int> NumbersAfter(const std::string& output,
                              absl::string_view key) {
  std::vector<int> numbers;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    const size_t at = line.find(key);
    int n = 0;
    if (at == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(at + key.size());
    rest = rest.substr(0, rest.find_first_not_of("0123456789"));
    if (absl::SimpleAtoi(rest, &n)) numbers.push_back(n);
  }
  return numbers;
}

Result RunDistrun(std::vector<std::string> args,
                  std::function<void(pid_t)> during = nullptr,
                  const std::string& when = "", int times = 1) {
  return FinishDistrun(StartDistrun(std::move(args)), std::move(during), when,
                       times);
}

TEST(DistrunTest, SetsTorchrunVariablesAndPrefixesOutput) {
  Result r = RunDistrun(
      {"--nproc-per-node", "3", "--master-port", "0", "--", kProbe, "env"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(absl::StrContains(
        r.output,
        absl::StrCat("[rank", rank, "]: RANK=", rank, " LOCAL_RANK=", rank,
                     " WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 "
                     "MASTER_ADDR=127.0.0.1 MASTER_PORT=")))
        << r.output;
  }
  EXPECT_TRUE(absl::StrContains(r.output, "STORE=127.0.0.1:")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "TOKEN_LEN=32")) << r.output;
}

// The CPUs this test may use, as distrun sees them.
std::vector<int> AllowedCpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  return cpus;
}

TEST(DistrunTest, CpuBindCoreGivesEachLocalRankItsOwnCpu) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  const int n = std::min<int>(2, cpus.size());
  Result r = RunDistrun({"--nproc-per-node", absl::StrCat(n), "--master-port",
                         "0", "--cpu-bind", "core", "--", kProbe, "cpus"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_TRUE(absl::StrContains(
        r.output, absl::StrCat("[rank", rank, "]: cpus=", cpus[rank], "\n")))
        << r.output;
  }
  // More local ranks than CPUs: no binding (each keeps every CPU), and says
  // so.
  const int over = static_cast<int>(cpus.size()) + 1;
  r = RunDistrun({"--nproc-per-node", absl::StrCat(over), "--master-port", "0",
                  "--cpu-bind", "core", "--", kProbe, "cpus"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "not binding")) << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, absl::StrCat("[rank", over - 1,
                             "]: cpus=", absl::StrJoin(cpus, ","), "\n")))
      << r.output;
}

TEST(DistrunTest, RanksRendezvousThroughTheStore) {
  Result r = RunDistrun({"--nproc-per-node", "4", "--master-port", "0", "--",
                         kProbe, "rendezvous"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(absl::StrContains(
        r.output, absl::StrCat("[rank", rank, "]: rendezvous rank=", rank,
                               " world=4 sum=6 expected=6 intruder_refused=1")))
        << r.output;
  }
}

TEST(DistrunTest, FailingRankStopsTheOthersAndGivesItsCode) {
  Result r = RunDistrun({"--nproc-per-node", "3", "--master-port", "0", "--",
                         kProbe, "fail", "1", "7"});
  EXPECT_EQ(r.exit_code, 7) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "distrun: rank 1 (pid ")) << r.output;
  EXPECT_TRUE(
      absl::StrContains(r.output, "exited with code 7; stopping rank(s) 0, 2"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank1]: rank 1 failing on purpose"))
      << r.output;
  EXPECT_LT(r.elapsed,
            absl::Seconds(20));  // the others sleep 120 s if not stopped
}

// Rank 1 is killed by SIGKILL and rank 0, blocked on it, exits 1 at once:
// distrun sees both ended at its next look. The rank killed is the cause
// (message, exit code), not rank 0, which was checked first in rank order.
TEST(DistrunTest, BlamesTheRankKilledNotThePeerItTookDown) {
  const std::string fifo =
      absl::StrCat(getenv("TEST_TMPDIR"), "/killed_peer_fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  Result r = RunDistrun({"--nproc-per-node", "2", "--master-port", "0", "--",
                         kProbe, "killed-peer", fifo});
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "distrun: rank 1 (pid ")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "was killed by signal 9 (Killed)"))
      << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "distrun: rank 0 (pid "))
      << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(20)) << r.output;
}

// --timeout while a failed rank's peers have their notice: the failure
// stays the result (not 124), and their SIGTERM still waits for the notice.
// Ordered, not timed: rank 0 fails only once rank 1 ignores SIGTERM (its
// file), so the SIGTERM after the notice always finds it ignoring; and the
// failure needs only the two ranks' start, not a head start on the timeout
// (500 ms then, against a 2 s timeout, lost to a loaded machine). The
// timeout (4 s) then lands inside the notice (2 s) and grace (5 s) that
// follow the failure whenever the ranks start within 4 s.
TEST(DistrunTest, TimeoutKeepsAnEarlierFailuresCode) {
  const std::string ignoring =
      absl::StrCat(getenv("TEST_TMPDIR"), "/term_ignored");
  unlink(ignoring.c_str());
  Result r =
      RunDistrun({"--nproc-per-node", "2", "--master-port", "0", "--timeout",
                  "4", "--grace-period", "5", "--", "/bin/sh", "-c",
                  "if [ \"$RANK\" = 1 ]; then trap '' TERM; : >\"$1\"; "
                  "else while [ ! -e \"$1\" ]; do sleep 0.01; done; fi; "
                  "exec \"$2\" fail-ignoring-term 0 3 0",
                  "sh", ignoring, kProbe});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: rank 0 failing on purpose"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "exited with code 3")) << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, "timed out after 4s; the ranks are already being stopped"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "rank 1 (pid ")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "did not stop after SIGTERM"))
      << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(20)) << r.output;
}

// --max-replacements: the failed rank alone starts again with
// DISTKIT_REPLACEMENT; the others run on untouched (one start each).
TEST(DistrunTest, ReplacesAFailedRankAlone) {
  Result r = RunDistrun({"--nproc-per-node", "3", "--master-port", "0",
                         "--max-replacements", "1", "--", kProbe, "replaced",
                         "1", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, "[rank1]: start RANK=1 LOCAL_RANK=1 REPLACEMENT=none"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, "[rank1]: start RANK=1 LOCAL_RANK=1 REPLACEMENT=1 "))
      << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, "exited with code 5; starting it again (replacement 1"))
      << r.output;
  for (int rank : {0, 2}) {
    const std::string start = absl::StrCat("[rank", rank, "]: start ");
    const size_t first = r.output.find(start);
    ASSERT_NE(first, std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(start, first + 1), std::string::npos) << r.output;
    EXPECT_TRUE(
        absl::StrContains(r.output, absl::StrCat("[rank", rank, "]: done")))
        << r.output;
  }
}

// The budget is per job: the failure after the last replacement stops the
// job as without the flag, with that failure's code.
TEST(DistrunTest, StopsTheJobOnceReplacementsAreSpent) {
  Result r = RunDistrun({"--nproc-per-node", "3", "--master-port", "0",
                         "--max-replacements", "2", "--", kProbe, "replaced",
                         "1", "9"});
  EXPECT_EQ(r.exit_code, 5) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "REPLACEMENT=2 ")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "REPLACEMENT=3 ")) << r.output;
  EXPECT_TRUE(
      absl::StrContains(r.output, "exited with code 5; stopping rank(s) 0, 2"))
      << r.output;
}

// --min-ranks: a rank killed by a signal and not replaced leaves the others
// running while enough remain; its death is not the job's failure.
TEST(DistrunTest, GoesOnWithoutALostRankWhileEnoughRemain) {
  Result r = RunDistrun({"--nproc-per-node", "3", "--master-port", "0",
                         "--min-ranks", "2", "--", kProbe, "lost", "1", "-1"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, "killed by signal 9 (Killed); the job goes on without it"))
      << r.output;
  for (int rank : {0, 2}) {
    EXPECT_TRUE(
        absl::StrContains(r.output, absl::StrCat("[rank", rank, "]: done")))
        << r.output;
  }
}

// Under --min-ranks a rank that exits with an error code still stops the job
// (its program failed: never masked), and so does a death below M; a
// replacement, while the budget lasts, comes first.
TEST(DistrunTest, MinRanksStopsOnErrorsAndBelowItReplacesFirst) {
  Result error =
      RunDistrun({"--nproc-per-node", "3", "--master-port", "0", "--min-ranks",
                  "1", "--", kProbe, "lost", "1", "2"});
  EXPECT_EQ(error.exit_code, 5) << error.output;
  EXPECT_TRUE(absl::StrContains(error.output, "the job goes on without it"))
      << error.output;
  EXPECT_TRUE(
      absl::StrContains(error.output, "exited with code 5; stopping rank(s) 0"))
      << error.output;
  Result below =
      RunDistrun({"--nproc-per-node", "3", "--master-port", "0", "--min-ranks",
                  "3", "--", kProbe, "lost", "1", "-1"});
  EXPECT_EQ(below.exit_code, 128 + 9) << below.output;
  EXPECT_TRUE(absl::StrContains(below.output, "stopping rank(s) 0, 2"))
      << below.output;
  Result replaced = RunDistrun({"--nproc-per-node", "3", "--master-port", "0",
                                "--max-replacements", "1", "--min-ranks", "2",
                                "--", kProbe, "replaced", "1", "2"});
  EXPECT_EQ(replaced.exit_code, 5) << replaced.output;
  EXPECT_TRUE(absl::StrContains(replaced.output, "REPLACEMENT=1 "))
      << replaced.output;
}

TEST(DistrunTest, RankIgnoringSigtermIsKilledAfterGrace) {
  Result r =
      RunDistrun({"--nproc-per-node", "2", "--master-port", "0", "--timeout",
                  "1", "--grace-period", "1", "--", kProbe, "ignore-term"});
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output,
                                "did not stop after SIGTERM; sending SIGKILL"))
      << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(15));
}

TEST(DistrunTest, TimeoutNamesRanksStillRunning) {
  Result r = RunDistrun({"--nproc-per-node", "2", "--master-port", "0",
                         "--timeout", "1", "--", kProbe, "hang"});
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_TRUE(
      absl::StrContains(r.output, "timed out after 1s; stopping rank(s) 0, 1"))
      << r.output;
}

TEST(DistrunTest, ForwardsSigtermToRanks) {
  Result r = RunDistrun(
      {"--nproc-per-node", "2", "--master-port", "0", "--", kProbe,
       "trap-term"},
      [](pid_t pid) { kill(pid, SIGTERM); }, "ready", /*times=*/2);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: got SIGTERM")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank1]: got SIGTERM")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "forwarding it to every rank"))
      << r.output;
}

// SIGHUP (a closed terminal or ssh session) and SIGQUIT are forwarded too,
// and are the job's result; before, SIGHUP killed distrun outright.
TEST(DistrunTest, ForwardsSighupAndSigquitToRanks) {
  for (int sig : {SIGHUP, SIGQUIT}) {
    Result r = RunDistrun(
        {"--nproc-per-node", "2", "--master-port", "0", "--", kProbe,
         "trap-signals"},
        [sig](pid_t pid) { kill(pid, sig); }, "ready", /*times=*/2);
    EXPECT_EQ(r.exit_code, 128 + sig) << r.output;
    const std::string got =
        absl::StrCat("got signal ", sig < 10 ? "0" : "", sig, "\n");
    EXPECT_TRUE(absl::StrContains(r.output, absl::StrCat("[rank0]: ", got)))
        << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, absl::StrCat("[rank1]: ", got)))
        << r.output;
    EXPECT_TRUE(absl::StrContains(r.output,
                                  absl::StrCat("received signal ", sig, " (")))
        << r.output;
  }
}

// What a directory holds (names), or nothing if it cannot be read.
std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(d);
  }
  return names;
}

// distrun killed outright (SIGKILL: nothing to forward) takes its ranks
// with it: no orphan keeps running. Nor does it leave a temporary trace
// directory (no rank failed, so none was made), looked for in a TMPDIR of
// the test's own.
TEST(DistrunTest, RanksDieWithAKilledLauncher) {
  std::vector<pid_t> ranks;
  const std::string tmp = absl::StrCat(getenv("TEST_TMPDIR"), "/killed_tmp");
  ASSERT_EQ(mkdir(tmp.c_str(), 0755), 0);
  const char* saved = getenv("TMPDIR");
  const std::string saved_tmpdir = saved != nullptr ? saved : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  Result r = RunDistrun(
      {"--nproc-per-node", "2", "--master-port", "0", "--", kProbe, "pid"},
      [](pid_t pid) { kill(pid, SIGKILL); }, "pid=", /*times=*/2);
  if (saved != nullptr) {
    setenv("TMPDIR", saved_tmpdir.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.output;
  EXPECT_TRUE(Entries(tmp).empty())
      << "left in TMPDIR: " << absl::StrJoin(Entries(tmp), ", ");
  for (absl::string_view line : absl::StrSplit(r.output, '\n')) {
    const size_t at = line.find("pid=");
    int pid = 0;
    if (at != absl::string_view::npos &&
        absl::SimpleAtoi(line.substr(at + 4), &pid)) {
      ranks.push_back(pid);
    }
  }
  ASSERT_EQ(ranks.size(), 2u) << r.output;
  for (pid_t rank : ranks) {
    bool gone = false;
    for (int i = 0; i < 50 && !gone; ++i) {
      gone = kill(rank, 0) != 0 && errno == ESRCH;
      if (!gone) absl::SleepFor(absl::Milliseconds(100));
    }
    EXPECT_TRUE(gone) << "rank pid " << rank << " outlived its launcher";
  }
}

// Started with SIGCHLD ignored (SIG_IGN survives exec: a daemon, a
// Python parent's subprocess), the kernel reaped the ranks itself, waitpid
// never reported them, and distrun waited forever. The ranks do not inherit
// the SIG_IGN either.
TEST(DistrunTest, EndsWhenStartedWithSigchldIgnored) {
  Started s =
      StartDistrun({"--nproc-per-node", "1", "--master-port", "0", "--",
                    "/bin/sh", "-c", "grep SigIgn /proc/self/status; exit 3"},
                   0, [] { signal(SIGCHLD, SIG_IGN); });
  bool killed = false;
  Result r = FinishDistrunWithin(s, absl::Seconds(30), &killed);
  EXPECT_FALSE(killed) << "distrun hung\n" << r.output;
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(15)) << r.output;
  // The rank's ignored signals: SIGCHLD (17) is bit 16.
  const size_t at = r.output.find("SigIgn:");
  ASSERT_NE(at, std::string::npos) << r.output;
  uint64_t ignored = 0;
  ASSERT_TRUE(
      absl::SimpleHexAtoi(absl::StripAsciiWhitespace(
                              absl::string_view(r.output).substr(at + 7, 18)),
                          &ignored))
      << r.output;
  EXPECT_EQ(ignored & (uint64_t{1} << (SIGCHLD - 1)), 0u) << r.output;
}

// Ranks run in background process groups of their own: one reading a
// terminal on stdin was stopped (SIGTTIN) and the job hung. Their stdin is
// /dev/null: a read ends at EOF. distrun here leads a session whose
// controlling terminal (and stdin) is a pty, as from an interactive shell.
TEST(DistrunTest, RanksReadStdinFromDevNull) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string slave = ptsname(master);
  Started s = StartDistrun(
      {"--nproc-per-node", "2", "--master-port", "0", "--", "/bin/sh", "-c",
       "if read x; then echo \"read $x\"; else echo 'stdin at EOF'; fi; "
       "readlink /proc/self/fd/0"},
      0, [&slave] {
        setsid();
        const int fd = open(slave.c_str(), O_RDWR);  // the controlling tty
        if (fd >= 0) dup2(fd, 0);
      });
  bool killed = false;
  Result r = FinishDistrunWithin(s, absl::Seconds(30), &killed);
  close(master);
  EXPECT_FALSE(killed) << "distrun hung\n" << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(absl::StrContains(
        r.output, absl::StrCat("[rank", rank, "]: stdin at EOF\n")))
        << r.output;
    EXPECT_TRUE(absl::StrContains(
        r.output, absl::StrCat("[rank", rank, "]: /dev/null\n")))
        << r.output;
  }
}

// Input that is not a terminal (a pipe, a file: `distrun ... < data`) is
// the ranks' stdin, as torchrun's workers inherit it.
TEST(DistrunTest, RanksInheritStdinThatIsNoTerminal) {
  char path[] = "/tmp/distrun_stdin_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "hello\n", 6), 6);
  close(fd);
  const std::string file = path;
  Started s = StartDistrun(
      {"--nproc-per-node", "1", "--master-port", "0", "--", "/bin/sh", "-c",
       "if read x; then echo \"read $x\"; else echo 'stdin at EOF'; fi"},
      0, [&file] {
        const int in = open(file.c_str(), O_RDONLY);
        if (in >= 0) dup2(in, 0);
      });
  bool killed = false;
  Result r = FinishDistrunWithin(s, absl::Seconds(30), &killed);
  unlink(path);
  EXPECT_FALSE(killed) << "distrun hung\n" << r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: read hello\n")) << r.output;
}

// A stopped rank is reported, and the job's stop continues it (SIGCONT
// after SIGTERM), so it ends at SIGTERM without waiting for SIGKILL.
TEST(DistrunTest, ReportsAStoppedRankAndStillStopsIt) {
  Started s = StartDistrun({"--nproc-per-node", "1", "--master-port", "0",
                            "--timeout", "2", "--grace-period", "20", "--",
                            "/bin/sh", "-c", "kill -STOP $$; echo continued"});
  bool killed = false;
  Result r = FinishDistrunWithin(s, absl::Seconds(60), &killed);
  EXPECT_FALSE(killed) << r.output;
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, absl::StrCat("was stopped by signal ", SIGSTOP, " (")))
      << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "did not stop after SIGTERM"))
      << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(15)) << r.output;
}

// Whether no process is left in process group `pgid`, waiting up to 10 s;
// kills what is left when some is.
bool GroupGone(pid_t pgid) {
  for (int i = 0; i < 100; ++i) {
    if (kill(-pgid, 0) != 0 && errno == ESRCH) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  kill(-pgid, SIGKILL);
  return false;
}

// What a rank started dies with it when distrun is stopped (SIGTERM: the
// signal goes to each rank's whole group) or killed outright (SIGKILL:
// PR_SET_PDEATHSIG kills only the rank; the watcher kills its group).
TEST(DistrunTest, KillingDistrunEndsTheRanksWholeProcessGroups) {
  for (int sig : {SIGTERM, SIGKILL}) {
    Started s =
        StartDistrun({"--nproc-per-node", "2", "--master-port", "0", "--",
                      "/bin/sh", "-c", "sleep 77 & echo \"pgid=$$\"; wait"});
    bool killed = false;
    Result r = FinishDistrunWithin(s, absl::Seconds(60), &killed,
                                   [sig](pid_t pid, const std::string& output) {
                                     if (Occurrences(output, "pgid=") < 2)
                                       return false;
                                     kill(pid, sig);
                                     return true;
                                   });
    EXPECT_FALSE(killed) << r.output;
    EXPECT_EQ(r.exit_code, 128 + sig) << r.output;
    const std::vector<int> groups = NumbersAfter(r.output, "pgid=");
    ASSERT_EQ(groups.size(), 2u) << r.output;
    for (pid_t pgid : groups) {
      EXPECT_TRUE(GroupGone(pgid))
          << "signal " << sig << ": a process of rank group " << pgid
          << " outlived distrun\n"
          << r.output;
    }
  }
}

// torch.distributed's env:// works under distrun: MASTER_PORT is not the
// port distrun's store holds (rank 0's TCPStore failed with "address
// already in use"); the store is at DISTKIT_STORE, MASTER_PORT one above.
TEST(DistrunTest, MasterPortIsLeftFreeForTorch) {
  Result r = RunDistrun(
      {"--nproc-per-node", "2", "--master-port", "0", "--", kProbe, "env"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<int> master = NumbersAfter(r.output, "MASTER_PORT=");
  const std::vector<int> store = NumbersAfter(r.output, "STORE=127.0.0.1:");
  ASSERT_EQ(master.size(), 2u) << r.output;
  ASSERT_EQ(store.size(), 2u) << r.output;
  EXPECT_EQ(master[0], store[0] + 1) << r.output;
  EXPECT_EQ(master[1], master[0]) << r.output;
  if (system("/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null") !=
      0) {
    GTEST_SKIP() << "no python3 with torch.distributed here";
  }
  r = RunDistrun({"--nproc-per-node", "2", "--master-port", "0", "--timeout",
                  "240", "--", "/usr/bin/python3", "-c",
                  "import os, torch, torch.distributed as d\n"
                  "d.init_process_group('gloo', init_method='env://')\n"
                  "t = torch.ones(1)\n"
                  "d.all_reduce(t)\n"
                  "print('torch rank', d.get_rank(), 'sum', int(t.item()),\n"
                  "      'store', os.environ['DISTKIT_STORE'], flush=True)\n"
                  "d.destroy_process_group()\n"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: torch rank 0 sum 2"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank1]: torch rank 1 sum 2"))
      << r.output;
}

TEST(DistrunTest, KeepsStdoutStderrAndPartialLinesAndLogDir) {
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/logs");
  Result r = RunDistrun({"--nproc-per-node", "2", "--master-port", "0",
                         "--log-dir", dir, "--", kProbe, "print"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank1]: out line 2\n")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: err line\n")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: partial\n")) << r.output;
  std::ifstream log(dir + "/rank_1.log");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(), "out line 1\nout line 2\n"))
      << text.str();
  EXPECT_TRUE(absl::StrContains(text.str(), "err line")) << text.str();
}

// --log-dir makes missing parents; one that cannot be made, or a log file
// that cannot be opened, fails the job naming the path (before, the logs
// silently went nowhere).
TEST(DistrunTest, LogDirMakesParentsAndFailsClearly) {
  const std::string tmp = getenv("TEST_TMPDIR");
  const std::string nested = tmp + "/log_parents/a/b";
  Result r = RunDistrun({"--nproc-per-node", "2", "--master-port", "0",
                         "--log-dir", nested, "--", kProbe, "print"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream log(nested + "/rank_1.log");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(), "out line 1\n")) << text.str();

  // A parent that is a file.
  const std::string file = tmp + "/log_file";
  ASSERT_TRUE(std::ofstream(file).good());
  r = RunDistrun({"--nproc-per-node", "1", "--master-port", "0", "--log-dir",
                  file + "/sub", "--", kProbe, "env"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, file + "/sub")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "[rank0]: RANK=")) << r.output;

  // A rank's log that cannot be opened (a directory in its place).
  const std::string blocked = tmp + "/log_blocked";
  ASSERT_EQ(mkdir(blocked.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((blocked + "/rank_1.log").c_str(), 0755), 0);
  r = RunDistrun({"--nproc-per-node", "2", "--master-port", "0", "--log-dir",
                  blocked, "--", kProbe, "env"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, absl::StrCat("cannot open log file ", blocked, "/rank_1.log")))
      << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(20)) << r.output;
}

// DISTKIT_MAX_REPLACEMENTS / DISTKIT_MIN_RANKS come from this distrun's
// flags only: values inherited from an outer distrun do not reach the ranks.
TEST(DistrunTest, ReplacementVariablesComeFromTheFlagsOnly) {
  setenv("DISTKIT_MAX_REPLACEMENTS", "3", 1);
  setenv("DISTKIT_MIN_RANKS", "2", 1);
  Result plain =
      RunDistrun({"--nproc-per-node", "1", "--master-port", "0", "--", kProbe,
                  "var", "DISTKIT_MAX_REPLACEMENTS", "DISTKIT_MIN_RANKS"});
  Result flagged =
      RunDistrun({"--nproc-per-node", "1", "--master-port", "0",
                  "--max-replacements", "1", "--min-ranks", "1", "--", kProbe,
                  "var", "DISTKIT_MAX_REPLACEMENTS", "DISTKIT_MIN_RANKS"});
  unsetenv("DISTKIT_MAX_REPLACEMENTS");
  unsetenv("DISTKIT_MIN_RANKS");
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_TRUE(absl::StrContains(plain.output,
                                "[rank0]: DISTKIT_MAX_REPLACEMENTS=<unset>\n"))
      << plain.output;
  EXPECT_TRUE(
      absl::StrContains(plain.output, "[rank0]: DISTKIT_MIN_RANKS=<unset>\n"))
      << plain.output;
  EXPECT_EQ(flagged.exit_code, 0) << flagged.output;
  EXPECT_TRUE(absl::StrContains(flagged.output,
                                "[rank0]: DISTKIT_MAX_REPLACEMENTS=1\n"))
      << flagged.output;
  EXPECT_TRUE(
      absl::StrContains(flagged.output, "[rank0]: DISTKIT_MIN_RANKS=1\n"))
      << flagged.output;
}

// Waits (bounded) until `done` holds; false if it never did.
bool WaitUntil(const std::function<bool()>& done,
               absl::Duration limit = absl::Seconds(30)) {
  const absl::Time end = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A process's state letter in /proc ('Z': exited, not yet waited for).
char ProcessState(pid_t pid) {
  const std::string stat = ReadText(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size()
             ? '?'
             : stat[paren + 2];
}

// The pid a rank_probe rank wrote to <dir>/pid once it appears; 0 if not.
pid_t RankPid(const std::string& dir) {
  int pid = 0;
  WaitUntil([&] { return absl::SimpleAtoi(ReadText(dir + "/pid"), &pid); });
  return pid;
}

// Whether the pipe read by `fd` is full: distrun, which writes to it, is
// then blocked in the write, between two of its polls.
bool PipeFull(int fd) {
  int queued = 0;
  return ioctl(fd, FIONREAD, &queued) == 0 && queued == fcntl(fd, F_GETPIPE_SZ);
}

// Whether `sig` sent to `pid` was taken (its handler ran), or is blocked.
bool SignalTakenOrBlocked(pid_t pid, int sig) {
  const uint64_t bit = uint64_t{1} << (sig - 1);
  uint64_t pending = 0, blocked = 0;
  for (absl::string_view line :
       absl::StrSplit(ReadText(absl::StrCat("/proc/", pid, "/status")), '\n')) {
    const std::vector<absl::string_view> kv = absl::StrSplit(line, ':');
    if (kv.size() != 2) continue;
    uint64_t value = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(kv[1]), &value)) {
      continue;
    }
    if (kv[0] == "SigPnd" || kv[0] == "ShdPnd") pending |= value;
    if (kv[0] == "SigBlk") blocked |= value;
  }
  return (pending & bit) == 0 || (blocked & bit) != 0;
}

// `text` without its first `skip` bytes (long lines a failure need not show).
std::string After(const std::string& text, size_t skip) {
  return text.substr(std::min(text.size(), skip));
}

// The output pipe these tests shrink to hold exactly one forwarded line;
// 0 where the kernel would not (then they are skipped).
int OutputPipeSize() {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  const int page = static_cast<int>(sysconf(_SC_PAGESIZE));
  const int size = fcntl(fds[0], F_SETPIPE_SZ, page) == page ? page : 0;
  close(fds[0]);
  close(fds[1]);
  return size;
}

// What a rank wrote just before it died goes out with its prefix before its
// replacement starts, though distrun reaps it before it reads its pipes
// again: the rank's two long lines fill distrun's queue past its limit
// (the test reads nothing; OutputSink::kBacklogLimit), so distrun stops
// reading the rank's pipes, and the rank's last words wait there until
// distrun reaps it and reads what it left.
TEST(DistrunTest, ForwardsAReplacedRanksLastOutput) {
  const int pipe_size = OutputPipeSize();
  if (pipe_size == 0) GTEST_SKIP() << "cannot shrink a pipe to a page";
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/last_words");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // Two lines of `line` bytes: the 1 MiB queue, the test's pipe, and 16 KiB
  // that stay in the rank's own pipe (64 KiB: the rank's write completes).
  const int line = (1 << 19) + pipe_size / 2 + (8 << 10);
  Started d = StartDistrun(
      {"--nproc-per-node", "1", "--master-port", "0", "--max-replacements", "1",
       "--", kProbe, "last-words", dir, absl::StrCat(line)},
      pipe_size);
  const pid_t rank = RankPid(dir);
  EXPECT_TRUE(WaitUntil([&] { return PipeFull(d.out); }));
  EXPECT_TRUE(std::ofstream(dir + "/go").good());
  // Exited: a zombie, or already reaped (distrun reaps it while its own
  // output waits for the reader).
  EXPECT_TRUE(WaitUntil([&] {
    return ProcessState(rank) == 'Z' || (kill(rank, 0) != 0 && errno == ESRCH);
  }));
  Result r = FinishDistrun(d);
  // What came after the two long lines.
  const std::string rest = After(r.output, 2 * static_cast<size_t>(line));
  EXPECT_EQ(r.exit_code, 0) << rest;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: last words\n")) << rest;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: dying now\n")) << rest;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: replacement up\n")) << rest;
  // The last words come before the replacement is announced.
  EXPECT_LT(r.output.find("dying now"), r.output.find("starting it again"))
      << rest;
}

// A line without its newline is forwarded once the rank pauses: a prompt is
// seen while the rank waits for its answer (here, a file made once the
// test sees the prompt), and what follows continues the same line.
TEST(DistrunTest, ForwardsALineWithoutNewlineWhenTheRankPauses) {
  const std::string go = absl::StrCat(getenv("TEST_TMPDIR"), "/prompt_go");
  Result r = RunDistrun(
      {"--nproc-per-node", "1", "--master-port", "0", "--", kProbe, "prompt",
       go},
      [&](pid_t) { EXPECT_TRUE(std::ofstream(go).good()); },
      "[rank0]: prompt> ");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: prompt> answered\n"))
      << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(15)) << r.output;
}

// A SIGTERM that comes after distrun's last read of its ranks' pipes (here
// while it forwards the last rank's last bytes into its full output pipe;
// the rank has exited) still ends distrun with 128 + SIGTERM, and the bytes
// still all go out. Before, it went into the self-pipe that nobody read
// again and distrun exited 0.
TEST(DistrunTest, SignalAfterTheLastReadIsNotLost) {
  const int pipe_size = OutputPipeSize();
  if (pipe_size == 0) GTEST_SKIP() << "cannot shrink a pipe to a page";
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/late_signal");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  Started d =
      StartDistrun({"--nproc-per-node", "1", "--master-port", "0", "--", kProbe,
                    "partial-exit", dir, absl::StrCat(2 * pipe_size)},
                   pipe_size);
  const pid_t rank = RankPid(dir);
  EXPECT_TRUE(WaitUntil([&] { return PipeFull(d.out); }));
  // Exited: a zombie, or already reaped when distrun's reap came first and
  // it blocked forwarding the rest afterwards. Either way its last read is
  // done and no ppoll comes again.
  EXPECT_TRUE(WaitUntil([&] {
    return ProcessState(rank) == 'Z' || (kill(rank, 0) != 0 && errno == ESRCH);
  }));
  kill(d.pid, SIGTERM);
  EXPECT_TRUE(WaitUntil([&] { return SignalTakenOrBlocked(d.pid, SIGTERM); }));
  Result r = FinishDistrun(d);
  const std::string rest = After(r.output, 2 * pipe_size);
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << "output ends: " << rest;
  EXPECT_TRUE(absl::StrContains(
      r.output, absl::StrCat("[rank0]: ", std::string(2 * pipe_size, 'p'))))
      << "output ends: " << rest;
}

// Waits up to `limit` for the started distrun to exit without reading its
// output (a reader that stopped reading); its exit code, or -1 if it was
// still running (then it is killed, and its ranks die with it).
int ExitCodeWithoutReading(const Started& s, absl::Duration limit,
                           absl::Duration* elapsed) {
  int status = 0;
  pid_t got = 0;
  const absl::Time deadline = s.start + limit;
  while ((got = waitpid(s.pid, &status, WNOHANG)) == 0 &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  *elapsed = absl::Now() - s.start;
  if (got == 0) {
    kill(s.pid, SIGKILL);
    waitpid(s.pid, &status, 0);
    close(s.out);
    return -1;
  }
  close(s.out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A reader of distrun's output that stops reading (a stalled ssh link) no
// longer stops distrun: its timeout still stops the ranks, and distrun
// exits 124 after giving the reader 10 s to take the rest, its flight
// record summary (the rank wrote a record) included. Before, distrun
// blocked in its write for as long as the reader did, its timeout and the
// signals it forwards with it.
TEST(DistrunTest, AReaderThatStopsReadingDoesNotStopTheTimeout) {
  const int pipe_size = OutputPipeSize();
  if (pipe_size == 0) GTEST_SKIP() << "cannot shrink a pipe to a page";
  Started d = StartDistrun(
      {"--nproc-per-node", "1", "--master-port", "0", "--timeout", "2",
       "--grace-period", "1", "--", kProbe, "flood", "5000000"},
      pipe_size);
  absl::Duration elapsed;
  EXPECT_EQ(ExitCodeWithoutReading(d, absl::Seconds(60), &elapsed), 124)
      << "distrun still ran after " << elapsed << " (-1: killed by the test)";
  // 2 s timeout, 1 s grace, 10 s for the stalled reader, and slack.
  EXPECT_LT(elapsed, absl::Seconds(40));
}

// The same stalled reader, and a SIGTERM to distrun: it is forwarded and is
// the job's result.
TEST(DistrunTest, AReaderThatStopsReadingDoesNotStopSignals) {
  const int pipe_size = OutputPipeSize();
  if (pipe_size == 0) GTEST_SKIP() << "cannot shrink a pipe to a page";
  Started d =
      StartDistrun({"--nproc-per-node", "1", "--master-port", "0",
                    "--grace-period", "1", "--", kProbe, "flood", "5000000"},
                   pipe_size);
  EXPECT_TRUE(WaitUntil([&] { return PipeFull(d.out); }));
  absl::SleepFor(absl::Milliseconds(500));
  kill(d.pid, SIGTERM);
  absl::Duration elapsed;
  EXPECT_EQ(ExitCodeWithoutReading(d, absl::Seconds(60), &elapsed),
            128 + SIGTERM)
      << "distrun still ran after " << elapsed << " (-1: killed by the test)";
  EXPECT_LT(elapsed, absl::Seconds(40));
}

// A reader that is slow but alive (a pager whose user reads the first
// screen while the job ends) gets all of the output, however long it
// pauses after the ranks are gone: only a stopped job (timeout, signal)
// gives up on a stalled reader.
TEST(DistrunTest, AReaderThatPausesGetsAllTheOutput) {
  const int pipe_size = OutputPipeSize();
  if (pipe_size == 0) GTEST_SKIP() << "cannot shrink a pipe to a page";
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/pausing");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  constexpr int kBytes = 200000;
  Started d = StartDistrun({"--nproc-per-node", "1", "--master-port", "0", "--",
                            kProbe, "partial-exit", dir, absl::StrCat(kBytes)},
                           pipe_size);
  const pid_t rank = RankPid(dir);
  EXPECT_TRUE(WaitUntil([&] {
    return ProcessState(rank) == 'Z' || (kill(rank, 0) != 0 && errno == ESRCH);
  }));
  absl::SleepFor(absl::Seconds(11));  // the reader pauses past 10 s
  Result r = FinishDistrun(d);
  EXPECT_EQ(r.exit_code, 0) << After(r.output, kBytes);
  EXPECT_TRUE(absl::StrContains(
      r.output, absl::StrCat("[rank0]: ", std::string(kBytes, 'p'))))
      << "got " << r.output.size() << " bytes";
}

// A descriptor distrun inherited without close-on-exec (here fd 47, open on
// /dev/null) does not reach its ranks, as torchrun's workers get none of
// the agent's.
TEST(DistrunTest, RanksInheritNoDescriptorsAboveStderr) {
  Started d = StartDistrun(
      {"--nproc-per-node", "1", "--master-port", "0", "--", kProbe, "fds"}, 0,
      [] {
        const int fd = open("/dev/null", O_RDONLY);
        if (fd >= 0 && fd != 47) {
          dup2(fd, 47);
          close(fd);
        }
      });
  Result r = FinishDistrun(d);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: fds: \n")) << r.output;
}

TEST(DistrunTest, OneProgramPerRank) {
  Result r = RunDistrun({"--nproc-per-node", "3", "--master-port", "0", "--",
                         kProbe, "tag", "a", ":", kProbe, "tag", "b", ":",
                         kProbe, "tag", "c"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank0]: tag=a rank=0")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank1]: tag=b rank=1")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[rank2]: tag=c rank=2")) << r.output;
}

TEST(DistrunTest, MissingProgramAndBadFlags) {
  Result r = RunDistrun({"--nproc-per-node", "1", "--master-port", "0", "--",
                         "/nonexistent/program"});
  EXPECT_EQ(r.exit_code, 127) << r.output;
  EXPECT_TRUE(
      absl::StrContains(r.output, "cannot execute /nonexistent/program"))
      << r.output;
  r = RunDistrun({"--nproc-per-node", "zero", "--", kProbe});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "usage: distrun")) << r.output;
}

// A port for a job of several nodes (which cannot ask for a free one), below
// the ephemeral range (32768-) so no outgoing connection holds it.
// A random one that is free now: a pid is no help (in Bazel's sandbox every
// test's pid is alike), and another test may hold any fixed one.
int FixedPort() {
  std::mt19937 random(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = 20000 + static_cast<int>(random() % 12000);
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free =
        bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    if (free) return port;
  }
  return 20000;
}

TEST(DistrunTest, MultiNodeShareOneStore) {
  // Two "nodes" on this host: node 0 hosts the store on a fixed port. Node
  // 1's ranks use the store again a second after the rendezvous, when node
  // 0's ranks have exited: node 0 keeps the store for them (the exit
  // barrier), else their last call finds it gone.
  const int port = FixedPort();
  setenv("DISTKIT_TOKEN", "shared-secret", 1);
  int node1_out[2];
  ASSERT_EQ(pipe(node1_out), 0);
  pid_t helper = fork();
  if (helper == 0) {
    close(node1_out[0]);
    Result r = RunDistrun(
        {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1",
         "--master-port", absl::StrCat(port), "--", kProbe, "rendezvous", "1"});
    const std::string report =
        absl::StrCat("exit=", r.exit_code, "\n", r.output);
    (void)!write(node1_out[1], report.data(), report.size());
    _exit(0);
  }
  close(node1_out[1]);
  Result node0 =
      RunDistrun({"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "0",
                  "--master-port", absl::StrCat(port), "--timeout", "60", "--",
                  kProbe, "rendezvous", "1"});
  std::string node1;
  char buf[4096];
  ssize_t n;
  while ((n = read(node1_out[0], buf, sizeof(buf))) > 0) node1.append(buf, n);
  close(node1_out[0]);
  waitpid(helper, nullptr, 0);
  unsetenv("DISTKIT_TOKEN");
  EXPECT_EQ(node0.exit_code, 0) << node0.output;
  EXPECT_TRUE(absl::StrContains(node0.output,
                                "[rank1]: rendezvous rank=1 world=4 sum=6"))
      << node0.output;
  EXPECT_TRUE(absl::StartsWith(node1, "exit=0\n")) << node1;
  EXPECT_TRUE(absl::StrContains(node1,
                                "[rank3]: rendezvous rank=3 world=4 sum=6 "
                                "expected=6 intruder_refused=1 "
                                "late_store_ok=1"))
      << node1;
}

TEST(DistrunTest, ExitBarrierIsBounded) {
  // Node 0 of two whose other node never comes: its ranks succeed, it waits
  // --exit-barrier-timeout for node 1's report, says so and exits 0.
  setenv("DISTKIT_TOKEN", "shared-secret", 1);
  Result r =
      RunDistrun({"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "0",
                  "--master-port", absl::StrCat(FixedPort()),
                  "--exit-barrier-timeout", "1", "--", kProbe, "env"});
  unsetenv("DISTKIT_TOKEN");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output,
                                "node(s) 1 did not report their ranks done "
                                "within 1s"))
      << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(20)) << r.output;
}

// A node whose failure notice cannot reach node 0's store (nothing listens
// at its port) says so through distrun's queue: with a reader that stopped
// reading, distrun still takes the SIGTERM that comes next and ends. The
// notice once wrote to stderr itself, with the signals blocked, and stayed
// in that write for good.
TEST(DistrunTest, AnUnsentFailureNoticeDoesNotBlockOnAStalledReader) {
  const int pipe_size = OutputPipeSize();
  if (pipe_size == 0) GTEST_SKIP() << "cannot shrink a pipe to a page";
  // Node 1 of two, whose node 0 (the store) is not there: rank 2 fills
  // distrun's output; rank 3 fails 300 ms after its start, leaving a file
  // as it exits.
  const std::string failed = absl::StrCat(getenv("TEST_TMPDIR"), "/failed");
  unlink(failed.c_str());
  std::vector<std::string> args = {
      "--nproc-per-node", "2",
      "--nnodes",         "2",
      "--node-rank",      "1",
      "--master-addr",    "127.0.0.1",
      "--master-port",    absl::StrCat(FixedPort()),
      "--grace-period",   "1"};
  for (const char* a : {"--", kProbe, "flood", "5000000", ":", "/bin/sh", "-c",
                        "\"$1\" fail 3 1; : >\"$2\"; exit 1", "sh", kProbe}) {
    args.push_back(a);
  }
  args.push_back(failed);
  Started d = StartDistrun(args, pipe_size,
                           [] { setenv("DISTKIT_TOKEN", "shared-secret", 1); });
  EXPECT_TRUE(WaitUntil([&] { return PipeFull(d.out); }));
  EXPECT_TRUE(WaitUntil([&] { return access(failed.c_str(), F_OK) == 0; }));
  // Its notice: reaped within 50 ms, then 500 ms of refused connects.
  absl::SleepFor(absl::Seconds(1));
  kill(d.pid, SIGTERM);
  absl::Duration elapsed;
  const int code = ExitCodeWithoutReading(d, absl::Seconds(60), &elapsed);
  // The failure's code, or the signal's: not killed by the test (-1).
  EXPECT_TRUE(code == 1 || code == 128 + SIGTERM)
      << code << " after " << elapsed << " (-1: still running, killed)";
  EXPECT_LT(elapsed, absl::Seconds(40));
}

TEST(DistrunTest, TimeoutBoundsTheExitBarrier) {
  // The same node 0 under --timeout 2 and the default 300 s barrier: the job's
  // bound ends the wait, and a node that never reported makes it a timeout.
  setenv("DISTKIT_TOKEN", "shared-secret", 1);
  Result r =
      RunDistrun({"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "0",
                  "--master-port", absl::StrCat(FixedPort()), "--timeout", "2",
                  "--", kProbe, "env"});
  unsetenv("DISTKIT_TOKEN");
  EXPECT_EQ(r.exit_code, 124) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "node(s) 1 did not report"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "(--timeout) in the exit barrier"))
      << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(20)) << r.output;
}

TEST(DistrunTest, SigtermEndsTheExitBarrier) {
  // Node 0 of two whose other node never comes, in a 60 s barrier: a
  // SIGTERM once its ranks are done ends the wait at once, as 128 + SIGTERM.
  setenv("DISTKIT_TOKEN", "shared-secret", 1);
  absl::Time signalled;
  Result r = RunDistrun(
      {"--nproc-per-node", "1", "--nnodes", "2", "--node-rank", "0",
       "--master-port", absl::StrCat(FixedPort()), "--exit-barrier-timeout",
       "60", "--", "/bin/true"},
      [&](pid_t pid) {
        absl::SleepFor(absl::Milliseconds(300));  // well inside the wait
        signalled = absl::Now();
        kill(pid, SIGTERM);
      },
      "(exit barrier)");
  unsetenv("DISTKIT_TOKEN");
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(20)) << r.output;
  EXPECT_LT(absl::Now() - signalled, absl::Seconds(5)) << r.output;
}

// Runs distrun with its stdout and stderr in two files (as `> out 2> err`);
// its exit code.
int RunDistrunApart(std::vector<std::string> args, const std::string& out,
                    const std::string& err) {
  args.insert(args.begin(), kDistrun);
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) _exit(126);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// With stdout and stderr apart, each file holds exactly what the rank wrote
// to it, prefixed: its stderr line does not end its open stdout line (a
// newline the rank never wrote, before), nor does the rank's end add one.
TEST(DistrunTest, StdoutAndStderrApartHoldTheRanksBytes) {
  const std::string dir = getenv("TEST_TMPDIR");
  const std::string out = dir + "/apart.out", err = dir + "/apart.err";
  EXPECT_EQ(RunDistrunApart({"--nproc-per-node", "1", "--master-port", "0",
                             "--", kProbe, "split"},
                            out, err),
            0)
      << ReadText(err);
  EXPECT_EQ(ReadText(out), "[rank0]: abcdef\n[rank0]: tail");
  EXPECT_EQ(ReadText(err), "[rank0]: warn\n");
}

// A SIGINT while distrun starts its ranks stops the launch there: ranks not
// started yet never start, those started get it, and distrun exits
// 128 + SIGINT. Rank 1's log is a FIFO, so distrun stays in starting rank 1
// until the test opens it, after the signal. Before, the signal waited,
// blocked, until every rank had started.
TEST(DistrunTest, SigintWhileRanksStartStopsTheLaunch) {
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/slow_start");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const std::string fifo_path = dir + "/rank_1.log";
  ASSERT_EQ(mkfifo(fifo_path.c_str(), 0644), 0);
  Started d = StartDistrun({"--nproc-per-node", "4", "--master-port", "0",
                            "--log-dir", dir, "--", kProbe, "hang"});
  // Rank 0's log is made once it is forked: distrun is starting its ranks.
  EXPECT_TRUE(WaitUntil(
      [&] { return access((dir + "/rank_0.log").c_str(), F_OK) == 0; }));
  kill(d.pid, SIGINT);
  EXPECT_TRUE(WaitUntil([&] { return SignalTakenOrBlocked(d.pid, SIGINT); }));
  const int fifo = open(fifo_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  Result r = FinishDistrun(d);
  if (fifo >= 0) close(fifo);
  EXPECT_EQ(r.exit_code, 128 + SIGINT) << r.output;
  for (int rank : {2, 3}) {
    EXPECT_NE(access(absl::StrCat(dir, "/rank_", rank, ".log").c_str(), F_OK),
              0)
        << "rank " << rank << " was started after the SIGINT\n"
        << r.output;
  }
  EXPECT_TRUE(absl::StrContains(r.output, "not starting rank(s) ")) << r.output;
  EXPECT_LT(r.elapsed, absl::Seconds(20)) << r.output;
}

// Reads `fd` until what was read holds `what` (or it ends); what was read.
std::string ReadUntil(int fd, absl::string_view what) {
  std::string text;
  char buf[4096];
  ssize_t n;
  while (!absl::StrContains(text, what) &&
         (n = read(fd, buf, sizeof(buf))) > 0) {
    text.append(buf, n);
  }
  return text;
}

// The local ports of this host's established IPv4 connections to `port`.
std::vector<std::string> ConnectionsTo(int port) {
  std::vector<std::string> found;
  const std::string to = absl::StrCat(
      ":",
      absl::AsciiStrToUpper(absl::StrCat(absl::Hex(port, absl::kZeroPad4))));
  for (absl::string_view line :
       absl::StrSplit(ReadText("/proc/net/tcp"), '\n')) {
    const std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() > 3 && absl::EndsWith(f[2], to) && f[3] == "01") {
      found.emplace_back(f[1]);
    }
  }
  return found;
}

// A SIGTERM that reaches node 1 after its ranks ended, while it reports to
// node 0 (stopped here, so the report waits for its store's answer), is
// node 1's result, reported, and node 0 exits with it: the job's result is
// not a success. Before, node 1 reported the 0 it had before the signal and
// node 0 exited 0.
TEST(DistrunTest, ALateSignalOnAnotherNodeIsTheJobsResult) {
  const int port = FixedPort();
  setenv("DISTKIT_TOKEN", "shared-secret", 1);
  Started node0 =
      StartDistrun({"--nproc-per-node", "1", "--nnodes", "2", "--node-rank",
                    "0", "--master-port", absl::StrCat(port), "--timeout", "60",
                    "--", "/bin/true"});
  const std::string seen = ReadUntil(node0.out, "(exit barrier)");
  kill(node0.pid, SIGSTOP);
  EXPECT_TRUE(WaitUntil([&] { return ProcessState(node0.pid) == 'T'; }));
  const std::vector<std::string> before = ConnectionsTo(port);
  Started node1 = StartDistrun({"--nproc-per-node", "1", "--nnodes", "2",
                                "--node-rank", "1", "--master-port",
                                absl::StrCat(port), "--", "/bin/true"});
  // Node 1's report has connected: its ranks are done, and it waits for
  // the stopped store's answer.
  EXPECT_TRUE(WaitUntil([&] {
    for (const std::string& c : ConnectionsTo(port)) {
      if (std::find(before.begin(), before.end(), c) == before.end()) {
        return true;
      }
    }
    return false;
  }));
  kill(node1.pid, SIGTERM);
  EXPECT_TRUE(
      WaitUntil([&] { return SignalTakenOrBlocked(node1.pid, SIGTERM); }));
  kill(node0.pid, SIGCONT);
  Result r1 = FinishDistrun(node1);
  Result r0 = FinishDistrun(node0);
  unsetenv("DISTKIT_TOKEN");
  r0.output = seen + r0.output;
  EXPECT_EQ(r1.exit_code, 128 + SIGTERM) << r1.output;
  EXPECT_EQ(r0.exit_code, 128 + SIGTERM) << r0.output << "\nnode 1:\n"
                                         << r1.output;
  EXPECT_TRUE(absl::StrContains(r0.output, "node 1 reported exit code 143"))
      << r0.output;
}

// Node 1 of three fails (its rank exits 1) after node 0's ranks ended, and
// node 2 never comes: node 0's exit barrier ends on the job's failure
// record, and the job's result is a failure (it was 0: "closing the store").
TEST(DistrunTest, AFailureElsewhereAfterTheRanksEndedIsTheJobsResult) {
  const int port = FixedPort();
  setenv("DISTKIT_TOKEN", "shared-secret", 1);
  Started node0 =
      StartDistrun({"--nproc-per-node", "1", "--nnodes", "3", "--node-rank",
                    "0", "--master-port", absl::StrCat(port),
                    "--exit-barrier-timeout", "10", "--", "/bin/true"});
  const std::string seen = ReadUntil(node0.out, "(exit barrier)");
  Result r1 =
      RunDistrun({"--nproc-per-node", "1", "--nnodes", "3", "--node-rank", "1",
                  "--master-port", absl::StrCat(port), "--", "/bin/false"});
  Result r0 = FinishDistrun(node0);
  unsetenv("DISTKIT_TOKEN");
  r0.output = seen + r0.output;
  EXPECT_EQ(r1.exit_code, 1) << r1.output;
  EXPECT_EQ(r0.exit_code, 1) << r0.output << "\nnode 1:\n" << r1.output;
  EXPECT_TRUE(absl::StrContains(r0.output, "the job failed: rank 1"))
      << r0.output;
}

// With several nodes, node 0's store on a name that resolves to loopback
// (localhost; the host's name where /etc/hosts maps it to 127.0.1.1) was
// out of the other hosts' reach: they retried "connection refused" for
// their whole connect timeout. distrun refuses it at once, as a bad flag.
TEST(DistrunTest, SeveralNodesRefuseALoopbackMasterName) {
  setenv("DISTKIT_TOKEN", "shared-secret", 1);
  // The free port (refused for several nodes too), and a fixed one; the
  // --timeout bounds a distrun that would wait for node 1 instead.
  for (const std::vector<std::string>& port :
       {std::vector<std::string>{"--master-port", "0"},
        std::vector<std::string>{"--master-port", absl::StrCat(FixedPort()),
                                 "--timeout", "5"}}) {
    std::vector<std::string> args = {
        "--nnodes", "2", "--node-rank", "0", "--master-addr", "localhost"};
    args.insert(args.end(), port.begin(), port.end());
    args.insert(args.end(), {"--", "true"});
    Result r = RunDistrun(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(absl::StrContains(
        r.output, "--master-addr: 'localhost' resolves to the loopback"))
        << r.output;
    EXPECT_LT(r.elapsed, absl::Seconds(4)) << r.output;
  }
  unsetenv("DISTKIT_TOKEN");
}

// An IPv6 master address: DISTKIT_STORE is "[::1]:port" ("::1:port" reads
// as the address ::1:port without a port where a colon-count decides,
// cc/comm/gloo/listen_address.cc), and the ranks meet through it.
TEST(DistrunTest, Ipv6MasterAddressIsBracketed) {
  const int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 loopback = {};
  loopback.sin6_family = AF_INET6;
  loopback.sin6_addr = in6addr_loopback;
  const bool v6 = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&loopback),
                                  sizeof(loopback)) == 0;
  if (fd >= 0) close(fd);
  if (!v6) GTEST_SKIP() << "no IPv6 loopback here";
  Result r = RunDistrun({"--nproc-per-node", "1", "--master-addr", "::1",
                         "--master-port", "0", "--", kProbe, "env"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "MASTER_ADDR=::1 ")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "STORE=[::1]:")) << r.output;
  r = RunDistrun({"--nproc-per-node", "2", "--master-addr", "::1",
                  "--master-port", "0", "--", kProbe, "rendezvous"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output,
                                "[rank1]: rendezvous rank=1 world=2 sum=1 "
                                "expected=1 intruder_refused=1"))
      << r.output;
}

}  // namespace
