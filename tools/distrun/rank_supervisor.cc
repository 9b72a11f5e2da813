#include "tools/distrun/rank_supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tools/distrun/output_forwarder.h"
#include "tools/distrun/output_sink.h"

namespace distkit {
namespace {

// The signals SuperviseRanks takes (bit sig - 1), set by OnSignal, which
// runs only inside the supervisor's ppoll (they are blocked elsewhere).
std::atomic<uint32_t> received_signals{0};
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "OnSignal must be async-signal-safe");

// Forwarded to every rank's process group, and the job's result.
constexpr std::array<int, 4> kForwardedSignals = {SIGINT, SIGTERM, SIGHUP,
                                                  SIGQUIT};

void OnSignal(int sig) { received_signals.fetch_or(uint32_t{1} << (sig - 1)); }

// How many reads of a dead rank's pipe go into forwarding what it left
// there (1 MiB): a process of its that outlived it must not keep us there.
constexpr int kMaxReadsAtExit = 16;

// Once the ranks are gone and the job was stopped (its timeout, a signal),
// how long distrun waits for a reader of its output that takes nothing
// before it exits without the rest: --timeout and a SIGTERM bound distrun's
// run, a stalled reader must not undo that. A job that ended by itself
// waits for its reader (`distrun ... | less`) as long as it takes.
constexpr absl::Duration kStalledReaderLimit = absl::Seconds(10);

// Closes every descriptor above 2 in a rank's process before its exec, as
// torchrun's workers get none of the launcher's (Popen's close_fds): one
// distrun inherited without close-on-exec (a harness's pipe) went on to
// every rank and what it started, and a parent waiting for that pipe's end
// waited for them. Async-signal-safe: after fork, in a process that may
// have threads.
void CloseInheritedFds() {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3u, ~0u, 0) == 0) return;
#endif
  struct rlimit files;
  int max_fd = 65536;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 &&
      files.rlim_cur < static_cast<rlim_t>(max_fd)) {
    max_fd = static_cast<int>(files.rlim_cur);
  }
  for (int fd = 3; fd < max_fd; ++fd) close(fd);
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// The watcher: a small process forked by the supervisor that outlives it
// when it is killed outright (SIGKILL, which it cannot act on), and then
// kills every rank's whole process group. PR_SET_PDEATHSIG kills only the
// rank itself (its direct child); what the rank started (a shell's
// children, a data loader's workers) would otherwise keep running. Each
// rank registers its group before exec, and the supervisor marks it done
// once reaped; the end of the pipe (every writer gone) without kQuit means
// the supervisor died. 8-byte records: a pipe write of one is atomic.
struct WatchRecord {
  int32_t op;
  int32_t pgid;
};
constexpr int32_t kWatchAdd = 1;
constexpr int32_t kWatchDone = 2;
constexpr int32_t kWatchQuit = 3;
constexpr int kMaxWatched = 4096;

// The watcher's body, after fork in a process that may have threads: only
// async-signal-safe calls (no allocation). `fd` is the pipe's read end;
// every other descriptor is closed (so it holds neither the pipe's write
// end, nor distrun's output, nor the store's socket); `max_fd` bounds the
// closing where close_range is missing.
[[noreturn]] void RunWatcher(int fd, int max_fd) {
  struct sigaction ignore;
  memset(&ignore, 0, sizeof(ignore));
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  // A Ctrl-C (the terminal's group) or a kill of distrun's process group
  // must not end it before distrun does.
  for (int sig : kForwardedSignals) sigaction(sig, &ignore, nullptr);
  setpgid(0, 0);
  if (fd != 3) {
    dup2(fd, 3);
    fd = 3;
  }
  bool closed = false;
#ifdef SYS_close_range
  closed = syscall(SYS_close_range, 4u, ~0u, 0) == 0;
#endif
  if (!closed) {
    for (int i = 4; i < max_fd; ++i) close(i);
  }
  close(0);
  close(1);
  close(2);
  pid_t groups[kMaxWatched];
  int n = 0;
  for (;;) {
    WatchRecord rec;
    const ssize_t got = read(fd, &rec, sizeof(rec));
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof(rec))) break;  // distrun is gone
    if (rec.op == kWatchQuit) _exit(0);
    if (rec.op == kWatchAdd && n < kMaxWatched) {
      groups[n++] = rec.pgid;
    } else if (rec.op == kWatchDone) {
      for (int i = 0; i < n; ++i) {
        if (groups[i] == rec.pgid) {
          groups[i] = groups[--n];
          break;
        }
      }
    }
  }
  for (int i = 0; i < n; ++i) kill(-groups[i], SIGKILL);
  _exit(0);
}

struct Stream {
  int fd = -1;  // read end of the rank's pipe (non-blocking); -1 once closed
  RankStream lines;
};

struct Rank {
  RankProcess spec;
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  // waitpid could not report its end (ECHILD: reaped elsewhere); the text
  // says why, and the rank counts as failed.
  std::string lost;
  Stream out, err;
  int log_fd = -1;
};

std::string DescribeExit(int status, const std::string& lost = "") {
  if (!lost.empty()) return lost;
  if (WIFEXITED(status))
    return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return "stopped";
}

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Whether distrun's stdout and stderr are to be read as one stream (their
// lines interleave, and one's open line is ended before the other's
// output): the same file, pipe or terminal, or two pipes or terminals,
// which a launcher or a shell usually merges downstream (srun, docker,
// subprocess with two pipes). Where either is a file of its own, each
// keeps its ranks' bytes exactly as written.
bool StdoutAndStderrShared() {
  struct stat out, err;
  if (fstat(1, &out) != 0 || fstat(2, &err) != 0) return true;
  if (out.st_dev == err.st_dev && out.st_ino == err.st_ino) return true;
  return !S_ISREG(out.st_mode) && !S_ISREG(err.st_mode);
}

class Supervisor {
 public:
  Supervisor(const std::vector<RankProcess>& specs,
             const SupervisorOptions& options)
      : options_(options) {
    for (const RankProcess& s : specs) {
      ranks_.emplace_back();
      ranks_.back().spec = s;
    }
  }

  int Run() {
    // The timeout bounds the whole job, its ranks' start included.
    start_ = absl::Now();
    TakeSignals();
    StartWatcher();
    if (!options_.log_dir.empty()) {
      // A log that silently went nowhere was found missing only when needed.
      const absl::Status made = MakeDirectories(options_.log_dir);
      if (!made.ok()) {
        Say(absl::StrCat("log directory: ", made.message()));
        result_ = 1;
      }
    }
    for (size_t i = 0; i < ranks_.size() && !result_.has_value(); ++i) {
      // A Ctrl-C while ranks start (many, or slow to fork) stops the launch
      // here: the ranks started get it, the others never start. Blocked
      // until the first ppoll, it waited for every rank to start.
      if (TakePendingSignals()) {
        std::vector<int> left;
        for (size_t j = i; j < ranks_.size(); ++j) {
          left.push_back(ranks_[j].spec.rank);
        }
        Say(absl::StrCat("not starting rank(s) ", absl::StrJoin(left, ", ")));
        break;
      }
      if (!Spawn(ranks_[i])) {
        FailedToStart(absl::StrCat("rank ", ranks_[i].spec.rank,
                                   " could not be started"));
        break;
      }
    }
    while (AnyRunning() || AnyStreamOpen()) {
      PumpOnce();
      Reap();
      CheckDeadlines();
      FlushQuietLines();
    }
    for (Rank& r : ranks_) {
      if (r.log_fd >= 0) close(r.log_fd);
    }
    // Where stdout is apart, its last open line stays as the rank left it;
    // one on stderr is ended, as distrun's own messages may follow there.
    output_.EndOpenLines();
    DrainOutput();
    StopWatcher();
    GiveBackSignals();
    return result_.value_or(0);
  }

 private:
  void Say(absl::string_view message) {
    output_.Message(2,
                    absl::StrCat(options_.program_name, ": ", message, "\n"));
  }
  // Say, for the callbacks (SupervisorSay).
  const SupervisorSay say_ = [this](absl::string_view m) { Say(m); };

  // The forwarded signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) stay blocked,
  // and are taken only inside PumpOnce's ppoll (which unblocks them while it
  // waits): one that comes at any other moment waits, pending, for the next
  // ppoll or, once the ranks are gone, for GiveBackSignals. None can fall
  // between a check and the return. (A self-pipe read in the loop lost a
  // signal that came after its last read.) Threads the callbacks start
  // inherit the block. SIGHUP or SIGQUIT ignored by the caller (nohup) stays
  // ignored, by the ranks too. SIGCHLD goes back to its default while the
  // ranks run: ignored (SIG_IGN inherited across exec, or SA_NOCLDWAIT), the
  // kernel reaps the ranks itself, waitpid never reports them, and the job
  // never ended.
  void TakeSignals() {
    struct sigaction chld;
    memset(&chld, 0, sizeof(chld));
    chld.sa_handler = SIG_DFL;
    sigemptyset(&chld.sa_mask);
    sigaction(SIGCHLD, &chld, &old_chld_);
    sigemptyset(&forwarded_);
    for (int sig : kForwardedSignals) {
      struct sigaction old;
      sigaction(sig, nullptr, &old);
      if (sig != SIGINT && sig != SIGTERM && old.sa_handler == SIG_IGN) {
        continue;
      }
      sigaddset(&forwarded_, sig);
    }
    sigprocmask(SIG_BLOCK, &forwarded_, &caller_mask_);
    poll_mask_ = caller_mask_;
    for (int sig : kForwardedSignals) {
      if (sigismember(&forwarded_, sig)) sigdelset(&poll_mask_, sig);
    }
    received_signals.store(0);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < kForwardedSignals.size(); ++i) {
      const int sig = kForwardedSignals[i];
      if (sigismember(&forwarded_, sig)) sigaction(sig, &sa, &old_actions_[i]);
    }
    signal(SIGPIPE, SIG_IGN);
  }

  // Acts on the signals a ppoll took: forwarded to every rank still running;
  // the first one (unless a failure came first) is the job's result.
  void ActOnSignals() {
    const uint32_t got = received_signals.exchange(0);
    for (int sig : kForwardedSignals) {
      if ((got & (uint32_t{1} << (sig - 1))) != 0) ActOnSignal(sig);
    }
  }

  void ActOnSignal(int sig) {
    Say(absl::StrCat(
        "received signal ", sig, " (", strsignal(sig), "); ",
        AnyRunning() ? "forwarding it to every rank" : "no rank is running"));
    for (Rank& r : ranks_) {
      if (r.running) {
        kill(-r.pid, sig);
        kill(-r.pid, SIGCONT);  // a stopped rank acts on it now
      }
    }
    if (!result_.has_value()) result_ = 128 + sig;
    if (!stopped_at_.has_value()) stopped_at_ = absl::Now();
    if (!kill_deadline_.has_value()) {
      kill_deadline_ = absl::Now() + options_.grace_period;
    }
  }

  // Acts on the forwarded signals pending now (they come outside ppoll
  // too); true if there was one.
  bool TakePendingSignals() {
    const timespec now = {0, 0};
    bool took = false;
    int sig;
    while ((sig = sigtimedwait(&forwarded_, nullptr, &now)) > 0) {
      ActOnSignal(sig);
      took = true;
    }
    return took;
  }

  // Once the ranks are gone: takes a signal still pending (it came after the
  // last ppoll), then puts back the caller's handlers and signal mask. A
  // signal that comes after that wait stays pending for the caller (distrun
  // keeps it blocked and takes it itself, exit_signals.h), or, where the
  // caller does not block it, is delivered to its handler at once.
  void GiveBackSignals() {
    TakePendingSignals();
    for (size_t i = 0; i < kForwardedSignals.size(); ++i) {
      const int sig = kForwardedSignals[i];
      if (sigismember(&forwarded_, sig)) {
        sigaction(sig, &old_actions_[i], nullptr);
      }
    }
    sigaction(SIGCHLD, &old_chld_, nullptr);
    sigprocmask(SIG_SETMASK, &caller_mask_, nullptr);
  }

  // Forks the watcher (RunWatcher). Without one (fork failed), the ranks
  // still die with distrun, but not what they started.
  void StartWatcher() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      Say(absl::StrCat("cannot create the watcher's pipe: ", strerror(errno),
                       "; if distrun is killed outright, processes the "
                       "ranks started may outlive it"));
      return;
    }
    struct rlimit files;
    int max_fd = 65536;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 &&
        files.rlim_cur < static_cast<rlim_t>(max_fd)) {
      max_fd = static_cast<int>(files.rlim_cur);
    }
    const pid_t pid = fork();
    if (pid == 0) RunWatcher(fds[0], max_fd);
    close(fds[0]);
    if (pid < 0) {
      Say(absl::StrCat(
          "cannot start the watcher: fork failed: ", strerror(errno),
          "; if distrun is killed outright, processes the "
          "ranks started may outlive it"));
      close(fds[1]);
      return;
    }
    watcher_ = pid;
    watch_fd_ = fds[1];
  }

  void TellWatcher(int32_t op, pid_t pgid) {
    if (watch_fd_ < 0) return;
    const WatchRecord rec = {op, static_cast<int32_t>(pgid)};
    while (write(watch_fd_, &rec, sizeof(rec)) < 0 && errno == EINTR) {
    }
  }

  // Every rank has been reaped (its group killed): the watcher ends without
  // killing anything.
  void StopWatcher() {
    if (watch_fd_ < 0) return;
    TellWatcher(kWatchQuit, 0);
    close(watch_fd_);
    watch_fd_ = -1;
    while (waitpid(watcher_, nullptr, 0) < 0 && errno == EINTR) {
    }
    watcher_ = -1;
  }

  bool Spawn(Rank& r) {
    // Opened before the fork: a rank whose output cannot be kept as asked
    // is not started.
    if (!options_.log_dir.empty() && r.log_fd < 0) {
      const std::string path =
          absl::StrCat(options_.log_dir, "/rank_", r.spec.rank, ".log");
      r.log_fd =
          open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (r.log_fd < 0) {
        Say(absl::StrCat("cannot open log file ", path, ": ", strerror(errno)));
        return false;
      }
    }
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      Say(absl::StrCat("cannot create pipes: ", strerror(errno)));
      return false;
    }
    std::vector<char*> argv, envp;
    for (std::string& a : r.spec.argv) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : r.spec.env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t launcher = getpid();
    const int watch_fd = watch_fd_;
    const pid_t pid = fork();
    if (pid < 0) {
      Say(absl::StrCat("fork failed: ", strerror(errno)));
      return false;
    }
    if (pid == 0) {
      // Own process group, so stopping a rank also stops what it started.
      setpgid(0, 0);
      // A rank dies with its launcher: if distrun is killed (even SIGKILL,
      // which it cannot forward), the kernel kills the rank, and the
      // watcher (RunWatcher) its whole process group, so that what the rank
      // started does not keep training and holding the job's ports and
      // memory either. (What leaves the group, setsid or setpgid, is not
      // followed.) The group is registered before anything in it can start
      // a process; the check after PR_SET_PDEATHSIG covers a launcher that
      // died before the call.
      if (watch_fd >= 0) {
        const WatchRecord rec = {kWatchAdd, static_cast<int32_t>(getpid())};
        (void)!write(watch_fd, &rec, sizeof(rec));
      }
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(128 + SIGKILL);
      // A terminal is no rank's stdin: each runs in a background process
      // group of its own, so reading it stopped the rank (SIGTTIN) and the
      // job hung; /dev/null instead (EOF at once). Piped or redirected
      // input is inherited, as torchrun's workers inherit it.
      const int null_fd = isatty(0) ? open("/dev/null", O_RDONLY) : 0;
      if (null_fd < 0 || (null_fd != 0 && dup2(null_fd, 0) < 0)) {
        const std::string msg =
            absl::StrCat("cannot open /dev/null for rank ", r.spec.rank,
                         "'s stdin: ", strerror(errno), "\n");
        (void)!write(err[1], msg.data(), msg.size());
        _exit(127);
      }
      if (null_fd != 0) close(null_fd);
      dup2(out[1], 1);
      dup2(err[1], 2);
      struct sigaction sa;
      memset(&sa, 0, sizeof(sa));
      sa.sa_handler = SIG_DFL;
      for (int sig : kForwardedSignals) {
        if (sigismember(&forwarded_, sig)) sigaction(sig, &sa, nullptr);
      }
      sigprocmask(SIG_UNBLOCK, &forwarded_, nullptr);  // blocked in distrun
      signal(SIGPIPE, SIG_DFL);
      signal(SIGCHLD, SIG_DFL);  // the rank's own children are reported
      if (r.spec.cpu >= 0) {
        cpu_set_t cpus;
        CPU_ZERO(&cpus);
        CPU_SET(r.spec.cpu, &cpus);
        if (sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
          const std::string msg =
              absl::StrCat("cannot bind rank ", r.spec.rank, " to CPU ",
                           r.spec.cpu, ": ", strerror(errno), "\n");
          (void)!write(2, msg.data(), msg.size());
          _exit(127);
        }
      }
      CloseInheritedFds();
      execvpe(argv[0], argv.data(), envp.data());
      const std::string msg =
          absl::StrCat("cannot execute ", argv[0], ": ", strerror(errno), "\n");
      (void)!write(2, msg.data(), msg.size());
      _exit(127);
    }
    setpgid(pid, pid);  // also from the parent, to win the race with kill()
    close(out[1]);
    close(err[1]);
    // Non-blocking, so that a dead rank's pipe is read up to what it holds.
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    r.pid = pid;
    r.running = true;
    r.lost.clear();
    r.out = Stream{out[0], RankStream{r.spec.rank, 1}};
    r.err = Stream{err[0], RankStream{r.spec.rank, 2}};
    return true;
  }

  bool AnyRunning() const {
    for (const Rank& r : ranks_) {
      if (r.running) return true;
    }
    return false;
  }

  bool AnyStreamOpen() const {
    for (const Rank& r : ranks_) {
      if (r.out.fd >= 0 || r.err.fd >= 0) return true;
    }
    return false;
  }

  // Reads what `s` holds now, at most `max_reads` times; closes it at EOF.
  void ReadStream(Rank& r, Stream& s, int max_reads) {
    char buf[65536];
    for (int i = 0; i < max_reads && s.fd >= 0; ++i) {
      const ssize_t got = read(s.fd, buf, sizeof(buf));
      if (got > 0) {
        if (r.log_fd >= 0) WriteAll(r.log_fd, absl::string_view(buf, got));
        output_.Add(s.lines, absl::string_view(buf, got), absl::Now());
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        CloseStream(s);
      } else if (errno == EAGAIN) {
        return;
      }
    }
  }

  void CloseStream(Stream& s) {
    output_.End(s.lines);
    close(s.fd);
    s.fd = -1;
  }

  // Waits up to 50 ms for the ranks' output (or for room to write
  // distrun's own), taking signals meanwhile, and forwards what came. While
  // distrun's output is backlogged (sink_), the ranks' pipes are left
  // unread: the ranks wait on them, distrun does not.
  void PumpOnce() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, Stream*>> owners;
    if (!sink_.backlogged()) {
      for (Rank& r : ranks_) {
        for (Stream* s : {&r.out, &r.err}) {
          if (s->fd >= 0) {
            fds.push_back(pollfd{s->fd, POLLIN, 0});
            owners.emplace_back(&r, s);
          }
        }
      }
    }
    sink_.AddPollFds(&fds);
    const timespec timeout = {0, 50 * 1000 * 1000};
    const int n = ppoll(fds.data(), fds.size(), &timeout, &poll_mask_);
    ActOnSignals();
    if (n <= 0) return;
    sink_.WriteReady();
    for (size_t i = 0; i < owners.size(); ++i) {
      if (fds[i].revents != 0) {
        ReadStream(*owners[i].first, *owners[i].second, 1);
      }
    }
  }

  // The ranks are gone: what is still queued for distrun's stdout and
  // stderr goes out, taking signals meanwhile (one that comes now is still
  // the job's result). A reader that is slow, or pauses (a pager), gets it
  // all; once the job was stopped (timeout or signal), one that takes
  // nothing for kStalledReaderLimit, counted from the stop or its last
  // progress, gets no more.
  void DrainOutput() {
    while (!sink_.empty()) {
      if (stopped_at_.has_value()) {
        const absl::Time since = std::max(*stopped_at_, sink_.last_progress());
        if (absl::Now() - since >= kStalledReaderLimit) {
          MarkReaderStalled(sink_.NextFd());
          break;
        }
      }
      std::vector<pollfd> fds;
      sink_.AddPollFds(&fds);
      const timespec timeout = {0, 50 * 1000 * 1000};
      const int n = ppoll(fds.data(), fds.size(), &timeout, &poll_mask_);
      ActOnSignals();
      if (n > 0) sink_.WriteReady();
    }
  }

  // Partial lines whose streams have been quiet go out (a prompt, a
  // progress bar): they may never get their newline.
  void FlushQuietLines() {
    const absl::Time now = absl::Now();
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd >= 0) output_.FlushIfQuiet(s->lines, now);
      }
    }
  }

  // A rank that exited: what it left in its pipes goes out now, before what
  // is said about its end and before a replacement gets new pipes (the
  // loop's last poll may have come before its last writes), and so does
  // its partial last line. A pipe a process of its still holds stays open.
  void ForwardWhatIsLeft(Rank& r) {
    for (Stream* s : {&r.out, &r.err}) {
      ReadStream(r, *s, kMaxReadsAtExit);
      output_.End(s->lines);
    }
  }

  // Every rank that ended since the last pass is reaped before any is
  // blamed: a rank killed by a signal often takes a peer blocked on it down
  // with an error exit in the same pass, and the peer, checked first in
  // rank order, was named as the job's failure.
  void Reap() {
    std::vector<Rank*> ended;
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      // Looked at before it is reaped: while the rank is a zombie its pid,
      // its group's id, cannot be a new process's, so the kill of its group
      // below cannot reach another job's processes.
      siginfo_t info;
      memset(&info, 0, sizeof(info));
      if (waitid(P_PID, r.pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == 0) {
        memset(&info, 0, sizeof(info));
        if (waitid(P_PID, r.pid, &info, WSTOPPED | WNOHANG) == 0 &&
            info.si_pid == r.pid) {
          // It waits for SIGCONT; a stop of the job (SIGTERM) sends one.
          Say(absl::StrCat(
              "rank ", r.spec.rank, " (pid ", r.pid, ") was stopped by signal ",
              info.si_status, " (", strsignal(info.si_status),
              "); it does nothing until continued (kill -CONT -", r.pid, ")"));
        }
        continue;
      }
      if (info.si_pid == 0 && errno == EINTR) continue;
      // Whatever the rank's children still hold open must not keep us here.
      kill(-r.pid, SIGKILL);
      int status = 0;
      pid_t got;
      while ((got = waitpid(r.pid, &status, 0)) < 0 && errno == EINTR) {
      }
      r.running = false;
      if (got == r.pid) {
        r.wait_status = status;
      } else {
        // Not ours to wait for any more (ECHILD: SIGCHLD ignored by someone
        // since, or reaped elsewhere): it ended, how is unknown. Counted as
        // a failure rather than waited for forever.
        r.lost = absl::StrCat("ended, but its exit status is lost (waitpid: ",
                              strerror(errno), ")");
        r.wait_status = 1 << 8;  // as exit code 1
      }
      TellWatcher(kWatchDone, r.pid);
      ForwardWhatIsLeft(r);
      ended.push_back(&r);
    }
    // The cause first: a death by signal before an error exit, then the
    // lowest rank (ranks_ is in rank order).
    std::stable_sort(ended.begin(), ended.end(), [](Rank* a, Rank* b) {
      return WIFSIGNALED(a->wait_status) && !WIFSIGNALED(b->wait_status);
    });
    for (Rank* r : ended) OnRankEnded(*r);
    if (!AnyRunning() && !drain_deadline_.has_value()) {
      drain_deadline_ = absl::Now() + absl::Seconds(2);
    }
  }

  void OnRankEnded(Rank& r) {
    const int status = r.wait_status;
    const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!failed || result_.has_value()) return;
    const std::string what = absl::StrCat("rank ", r.spec.rank, " (pid ", r.pid,
                                          ") ", DescribeExit(status, r.lost));
    // The callbacks below may write (to the job's store, or why they could
    // not): never into the middle of a rank's open line.
    output_.EndOpenLines();
    if (Replace(r, what)) return;
    // Only a rank that was killed is lost: one that exits with an error code
    // failed in its own program, which must stop the job.
    if (WIFSIGNALED(status) && options_.release &&
        options_.release(what, say_)) {
      Say(absl::StrCat(what, "; the job goes on without it"));
      return;
    }
    result_ = ExitCodeOf(status);
    absl::Duration notice = absl::ZeroDuration();
    if (options_.on_rank_failed) {
      options_.on_rank_failed(what, say_);
      notice = options_.notice_period;
    }
    StopAll(what, notice);
  }

  // Starts `r` again if options_.replace allows it; false when the job is to
  // stop instead. The dead process's output went out when it was reaped;
  // its pipes are closed (the new one gets new pipes).
  bool Replace(Rank& r, const std::string& what) {
    if (!options_.replace) return false;
    const int n = options_.replace(what, say_);
    if (n <= 0) return false;
    for (Stream* s : {&r.out, &r.err}) {
      if (s->fd >= 0) CloseStream(*s);
    }
    const std::string var = "DISTKIT_REPLACEMENT=";
    auto& env = r.spec.env;
    env.erase(std::remove_if(
                  env.begin(), env.end(),
                  [&](const std::string& e) { return e.rfind(var, 0) == 0; }),
              env.end());
    env.push_back(absl::StrCat(var, n));
    Say(absl::StrCat(what, "; starting it again (replacement ", n,
                     " of the job, DISTKIT_REPLACEMENT=", n,
                     "); the other ranks go on"));
    if (!Spawn(r)) {
      FailedToStart(absl::StrCat("replacement ", n, " of rank ", r.spec.rank,
                                 " could not be started"));
    }
    return true;
  }

  // A rank that could not be started fails the job (127) as a rank that
  // died does: the job's store hears of it (the other nodes' ranks stop
  // waiting for it), then the notice period, then SIGTERM.
  void FailedToStart(const std::string& what) {
    result_ = 127;
    absl::Duration notice = absl::ZeroDuration();
    if (options_.on_rank_failed) {
      options_.on_rank_failed(what, say_);
      notice = options_.notice_period;
    }
    StopAll(what, notice);
  }

  // SIGTERM now, or after `notice` to the ranks that have not ended by then.
  void StopAll(absl::string_view why,
               absl::Duration notice = absl::ZeroDuration()) {
    std::vector<int> still;
    for (const Rank& r : ranks_) {
      if (r.running) still.push_back(r.spec.rank);
    }
    if (still.empty()) {
      Say(absl::StrCat(why, "."));
    } else {
      Say(absl::StrCat(
          why, "; stopping rank(s) ", absl::StrJoin(still, ", "), " (",
          notice > absl::ZeroDuration()
              ? absl::StrCat("told through the job's store; SIGTERM after ",
                             absl::FormatDuration(notice), " if still running")
              : "SIGTERM",
          ", then SIGKILL after ", absl::FormatDuration(options_.grace_period),
          ")"));
    }
    if (notice > absl::ZeroDuration()) {
      term_deadline_ = absl::Now() + notice;
      return;
    }
    Terminate();
  }

  void Terminate() {
    for (Rank& r : ranks_) {
      if (r.running) {
        kill(-r.pid, SIGTERM);
        kill(-r.pid, SIGCONT);  // a stopped rank acts on it now
      }
    }
    kill_deadline_ = absl::Now() + options_.grace_period;
  }

  void CheckDeadlines() {
    const absl::Time now = absl::Now();
    if (options_.timeout > absl::ZeroDuration() && !timed_out_ &&
        now - start_ > options_.timeout && AnyRunning()) {
      timed_out_ = true;
      if (!stopped_at_.has_value()) stopped_at_ = now;
      // A failure or signal that came first stays the job's result.
      if (!result_.has_value()) result_ = kTimeoutExitCode;
      const std::string why = absl::StrCat(
          "timed out after ", absl::FormatDuration(options_.timeout));
      if (term_deadline_.has_value() || kill_deadline_.has_value()) {
        // Already being stopped: its notice period and grace period stand.
        Say(absl::StrCat(why, "; the ranks are already being stopped"));
      } else {
        StopAll(why);
      }
    }
    if (term_deadline_.has_value() && now > *term_deadline_) {
      term_deadline_.reset();
      if (AnyRunning()) Terminate();
    }
    if (kill_deadline_.has_value() && now > *kill_deadline_) {
      for (Rank& r : ranks_) {
        if (r.running) {
          Say(absl::StrCat("rank ", r.spec.rank, " (pid ", r.pid,
                           ") did not stop after SIGTERM; sending SIGKILL"));
          kill(-r.pid, SIGKILL);
        }
      }
      kill_deadline_.reset();
    }
    if (drain_deadline_.has_value() && now > *drain_deadline_) {
      // Every rank has exited; stop reading pipes a grandchild kept open.
      for (Rank& r : ranks_) {
        for (Stream* s : {&r.out, &r.err}) {
          if (s->fd >= 0) CloseStream(*s);
        }
      }
    }
  }

  SupervisorOptions options_;
  OutputSink sink_;  // distrun's stdout and stderr
  OutputForwarder output_{
      [this](int fd, absl::string_view text) { sink_.Write(fd, text); },
      StdoutAndStderrShared()};
  std::vector<Rank> ranks_;
  std::optional<int> result_;
  std::optional<absl::Time> term_deadline_;
  std::optional<absl::Time> kill_deadline_;
  std::optional<absl::Time> drain_deadline_;
  absl::Time start_;
  sigset_t forwarded_;    // those of kForwardedSignals taken (not ignored)
  sigset_t caller_mask_;  // the signal mask before Run
  sigset_t poll_mask_;    // caller_mask_ without forwarded_
  std::array<struct sigaction, kForwardedSignals.size()> old_actions_{};
  struct sigaction old_chld_ {};  // SIGCHLD's action before Run
  pid_t watcher_ = -1;            // RunWatcher's process
  int watch_fd_ = -1;             // the write end of its pipe
  bool timed_out_ = false;
  // When the job was first stopped by its timeout or a signal (bounds the
  // wait for a stalled reader, DrainOutput).
  std::optional<absl::Time> stopped_at_;
};

}  // namespace

absl::Status MakeDirectories(const std::string& path) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string dir = path.substr(0, end);
    if (!dir.empty() && dir.back() != '/' && mkdir(dir.c_str(), 0755) != 0 &&
        errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", dir, ": ", strerror(errno)));
    }
    if (end == std::string::npos) break;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", path, ": ", strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", path, ": it is not a directory"));
  }
  return absl::OkStatus();
}

int SuperviseRanks(const std::vector<RankProcess>& ranks,
                   const SupervisorOptions& options) {
  Supervisor supervisor(ranks, options);
  return supervisor.Run();
}

}  // namespace distkit
