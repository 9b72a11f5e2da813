#include "tools/distrun/rank_supervisor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace distkit {
namespace {

int signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const unsigned char byte = static_cast<unsigned char>(sig);
  (void)!write(signal_pipe[1], &byte, 1);
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

struct Stream {
  int fd = -1;         // read end of the rank's pipe; -1 once closed
  int forward_to = 1;  // our stdout or stderr
  std::string partial;
};

struct Rank {
  RankProcess spec;
  pid_t pid = -1;
  bool running = false;
  int wait_status = 0;
  Stream out, err;
  int log_fd = -1;
};

std::string DescribeExit(int status) {
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
    InstallSignalHandlers();
    if (!options_.log_dir.empty()) mkdir(options_.log_dir.c_str(), 0755);
    for (Rank& r : ranks_) {
      if (!Spawn(r)) {
        StopAll("a rank could not be started");
        result_ = 127;
        break;
      }
    }
    start_ = absl::Now();
    while (AnyRunning() || AnyStreamOpen()) {
      PumpOnce();
      Reap();
      CheckDeadlines();
    }
    for (Rank& r : ranks_) {
      if (r.log_fd >= 0) close(r.log_fd);
    }
    RestoreSignalHandlers();
    return result_.value_or(0);
  }

 private:
  void Say(absl::string_view message) {
    WriteAll(2, absl::StrCat(options_.program_name, ": ", message, "\n"));
  }

  void InstallSignalHandlers() {
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_sigint_);
    sigaction(SIGTERM, &sa, &old_sigterm_);
    handlers_installed_ = true;
    signal(SIGPIPE, SIG_IGN);
  }

  // Puts back what SIGINT and SIGTERM did before Run: once the ranks are
  // gone, nothing reads the pipe, and a Ctrl-C or scancel during what the
  // caller does next (node 0's exit barrier) must not vanish into it.
  void RestoreSignalHandlers() {
    if (!handlers_installed_) return;
    sigaction(SIGINT, &old_sigint_, nullptr);
    sigaction(SIGTERM, &old_sigterm_, nullptr);
    handlers_installed_ = false;
    for (int& fd : signal_pipe) {
      close(fd);
      fd = -1;
    }
  }

  bool Spawn(Rank& r) {
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
    const pid_t pid = fork();
    if (pid < 0) {
      Say(absl::StrCat("fork failed: ", strerror(errno)));
      return false;
    }
    if (pid == 0) {
      // Own process group, so stopping a rank also stops what it started.
      setpgid(0, 0);
      // A rank dies with its launcher: if distrun is killed (even SIGKILL,
      // which it cannot forward), the kernel kills the rank, so no orphan
      // keeps training and holding the job's ports and memory. The check
      // after it covers a launcher that died before the call.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(128 + SIGKILL);
      dup2(out[1], 1);
      dup2(err[1], 2);
      struct sigaction sa;
      memset(&sa, 0, sizeof(sa));
      sa.sa_handler = SIG_DFL;
      sigaction(SIGINT, &sa, nullptr);
      sigaction(SIGTERM, &sa, nullptr);
      signal(SIGPIPE, SIG_DFL);
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
      execvpe(argv[0], argv.data(), envp.data());
      const std::string msg =
          absl::StrCat("cannot execute ", argv[0], ": ", strerror(errno), "\n");
      (void)!write(2, msg.data(), msg.size());
      _exit(127);
    }
    setpgid(pid, pid);  // also from the parent, to win the race with kill()
    close(out[1]);
    close(err[1]);
    r.pid = pid;
    r.running = true;
    r.out = Stream{out[0], 1, ""};
    r.err = Stream{err[0], 2, ""};
    if (!options_.log_dir.empty() && r.log_fd < 0) {
      const std::string path =
          absl::StrCat(options_.log_dir, "/rank_", r.spec.rank, ".log");
      r.log_fd =
          open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
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

  // Forwards complete lines of `s` with the rank prefix; at EOF, the rest.
  void Forward(Rank& r, Stream& s, bool eof) {
    size_t start = 0;
    const std::string prefix = absl::StrCat("[rank", r.spec.rank, "]: ");
    while (true) {
      const size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      WriteAll(s.forward_to,
               absl::StrCat(prefix, absl::string_view(s.partial).substr(
                                        start, nl - start + 1)));
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (eof && !s.partial.empty()) {
      WriteAll(s.forward_to, absl::StrCat(prefix, s.partial, "\n"));
      s.partial.clear();
    }
  }

  void PumpOnce() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, Stream*>> owners;
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          fds.push_back(pollfd{s->fd, POLLIN, 0});
          owners.emplace_back(&r, s);
        }
      }
    }
    if (signal_pipe[0] >= 0) fds.push_back(pollfd{signal_pipe[0], POLLIN, 0});
    int n = poll(fds.data(), fds.size(), 50);
    if (n <= 0) return;
    for (size_t i = 0; i < owners.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Rank& r = *owners[i].first;
      Stream& s = *owners[i].second;
      char buf[65536];
      ssize_t got = read(s.fd, buf, sizeof(buf));
      if (got > 0) {
        if (r.log_fd >= 0) WriteAll(r.log_fd, absl::string_view(buf, got));
        s.partial.append(buf, got);
        Forward(r, s, false);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        Forward(r, s, true);
        close(s.fd);
        s.fd = -1;
      }
    }
    if (signal_pipe[0] >= 0 && fds.back().revents != 0) {
      unsigned char sig = 0;
      while (read(signal_pipe[0], &sig, 1) == 1) {
        Say(absl::StrCat("received signal ", static_cast<int>(sig), " (",
                         strsignal(sig), "); forwarding it to every rank"));
        for (Rank& r : ranks_) {
          if (r.running) kill(-r.pid, sig);
        }
        if (!result_.has_value()) result_ = 128 + sig;
        if (!kill_deadline_.has_value()) {
          kill_deadline_ = absl::Now() + options_.grace_period;
        }
      }
    }
  }

  void Reap() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      pid_t got = waitpid(r.pid, &status, WNOHANG);
      if (got != r.pid) continue;
      r.running = false;
      r.wait_status = status;
      // Whatever the rank's children still hold open must not keep us here.
      kill(-r.pid, SIGKILL);
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && !result_.has_value()) {
        const std::string what = absl::StrCat(
            "rank ", r.spec.rank, " (pid ", r.pid, ") ", DescribeExit(status));
        if (Replace(r, what)) continue;
        // Only a rank that was killed is lost: one that exits with an error
        // code failed in its own program, which must stop the job.
        if (WIFSIGNALED(status) && options_.release && options_.release(what)) {
          Say(absl::StrCat(what, "; the job goes on without it"));
          continue;
        }
        result_ = ExitCodeOf(status);
        absl::Duration notice = absl::ZeroDuration();
        if (options_.on_rank_failed) {
          options_.on_rank_failed(what);
          notice = options_.notice_period;
        }
        StopAll(what, notice);
      }
    }
    if (!AnyRunning() && !drain_deadline_.has_value()) {
      drain_deadline_ = absl::Now() + absl::Seconds(2);
    }
  }

  // Starts `r` again if options_.replace allows it; false when the job is to
  // stop instead. The dead process's output is flushed first: its pipes'
  // remaining lines still carry its prefix, and the new one gets new pipes.
  bool Replace(Rank& r, const std::string& what) {
    if (!options_.replace) return false;
    const int n = options_.replace(what);
    if (n <= 0) return false;
    for (Stream* s : {&r.out, &r.err}) {
      if (s->fd >= 0) {
        Forward(r, *s, true);
        close(s->fd);
        s->fd = -1;
      }
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
      result_ = 127;
      StopAll(absl::StrCat("replacement ", n, " of rank ", r.spec.rank,
                           " could not be started"));
    }
    return true;
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
      if (r.running) kill(-r.pid, SIGTERM);
    }
    kill_deadline_ = absl::Now() + options_.grace_period;
  }

  void CheckDeadlines() {
    const absl::Time now = absl::Now();
    if (options_.timeout > absl::ZeroDuration() && !timed_out_ &&
        now - start_ > options_.timeout && AnyRunning()) {
      timed_out_ = true;
      result_ = kTimeoutExitCode;
      StopAll(absl::StrCat("timed out after ",
                           absl::FormatDuration(options_.timeout)));
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
          if (s->fd >= 0) {
            Forward(r, *s, true);
            close(s->fd);
            s->fd = -1;
          }
        }
      }
    }
  }

  SupervisorOptions options_;
  std::vector<Rank> ranks_;
  std::optional<int> result_;
  std::optional<absl::Time> term_deadline_;
  std::optional<absl::Time> kill_deadline_;
  std::optional<absl::Time> drain_deadline_;
  absl::Time start_;
  bool handlers_installed_ = false;
  struct sigaction old_sigint_ {};
  struct sigaction old_sigterm_ {};
  bool timed_out_ = false;
};

}  // namespace

int SuperviseRanks(const std::vector<RankProcess>& ranks,
                   const SupervisorOptions& options) {
  Supervisor supervisor(ranks, options);
  return supervisor.Run();
}

}  // namespace distkit
