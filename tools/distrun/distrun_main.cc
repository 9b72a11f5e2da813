// distrun: distkit's launcher. See distrun_options.h for the command line and
// rank_supervisor.h for how ranks are watched.

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cc/launch/environment.h"
#include "cc/launch/launcher.h"
#include "cc/store/hash_store.h"
#include "cc/store/job_failure.h"
#include "cc/store/store_server.h"
#include "tools/distrun/distrun_options.h"
#include "tools/distrun/exit_barrier.h"
#include "tools/distrun/exit_signals.h"
#include "tools/distrun/job_failure_notice.h"
#include "tools/distrun/lost_rank_budget.h"
#include "tools/distrun/output_sink.h"
#include "tools/distrun/rank_supervisor.h"
#include "tools/distrun/replacement_budget.h"
#include "tools/distrun/trace_summary.h"

namespace distkit {
namespace {

std::string TempDir() {
  const char* t = std::getenv("TMPDIR");
  return t != nullptr && *t ? t : "/tmp";
}

// The run's own trace directory: flat, files only. Only a real directory
// of this user's is emptied, never what a symlink in its place points to.
void RemoveTree(const std::string& dir) {
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != geteuid()) {
    return;
  }
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

// Whether nothing listens on (or holds) TCP `port` on any IPv4 or IPv6
// address: a bind there succeeds. Without SO_REUSEADDR, a port that
// torch's store could take only with it counts as taken.
bool PortIsFree(int port) {
  for (int family : {AF_INET, AF_INET6}) {
    const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;  // no IPv6 here
    int rc;
    if (family == AF_INET) {
      sockaddr_in a = {};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    } else {
      sockaddr_in6 a = {};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      a.sin6_addr = in6addr_any;
      rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    }
    close(fd);
    if (rc != 0) return false;
  }
  return true;
}

// 128 random bits as hex: the job token every rank presents to the store.
std::string RandomToken() {
  char bytes[16] = {};
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    (void)!read(fd, bytes, sizeof(bytes));
    close(fd);
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

// distrun's own message to stderr once its ranks are gone: a reader that
// takes nothing for 10 s does not keep distrun from exiting (signals are
// blocked here, so none would end a blocked write), and one that distrun
// gave up on already (MarkReaderStalled: the supervisor's drain, or an
// earlier message) is not waited for again.
void Tell(absl::string_view text) { WriteWithin(2, text, absl::Seconds(10)); }

int Main(int argc, char** argv) {
  // SIGINT, SIGTERM, SIGHUP and SIGQUIT stay blocked in every thread (the
  // store's start after this): SuperviseRanks takes them while the ranks
  // run, and `signals` below afterwards, each where it looks
  // (exit_signals.h).
  BlockExitSignals();
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<DistrunOptions> parsed = ParseDistrunArgs(args);
  if (!parsed.ok()) {
    if (parsed.status().code() == absl::StatusCode::kCancelled) {
      std::cout << DistrunUsage();
      return 0;
    }
    std::cerr << parsed.status().message() << "\n" << DistrunUsage();
    return 2;
  }
  const DistrunOptions& o = *parsed;
  Environment env = Environment::FromProcess();
  // Before anything starts: logs asked for must not silently go nowhere.
  if (!o.log_dir.empty()) {
    const absl::Status made = MakeDirectories(o.log_dir);
    if (!made.ok()) {
      std::cerr << "distrun: --log-dir: " << made.message() << "\n";
      return 1;
    }
  }

  std::string token = env.Get("DISTKIT_TOKEN").value_or("");
  if (token.empty()) {
    if (o.nnodes > 1) {
      std::cerr
          << "distrun: with --nnodes > 1, export the same DISTKIT_TOKEN "
             "on every node (e.g. DISTKIT_TOKEN=$(openssl rand -hex 16))\n";
      return 2;
    }
    token = RandomToken();
  }

  // Node 0 hosts the store at --master-port; the others' ranks connect to
  // it. The port above it is torch.distributed's (MASTER_PORT): its env://
  // rank 0 serves a TCPStore of its own there, which failed with "address
  // already in use" when MASTER_PORT was the store's. The same two ports as
  // under torchrun, the other way round (there torch's agent store holds
  // MASTER_PORT and distkit's takes MASTER_PORT + 1: cc/launch/launcher.h).
  std::unique_ptr<StoreServer> server;
  int port = o.master_port;
  if (o.node_rank == 0) {
    // Port 0: a free port whose next one is free too (a few tries).
    for (int attempt = 0;; ++attempt) {
      absl::StatusOr<std::unique_ptr<StoreServer>> started = StoreServer::Start(
          {JoinHostPort(o.master_addr, o.master_port), token});
      if (!started.ok()) {
        std::cerr << "distrun: " << started.status().message() << "\n";
        return 1;
      }
      server = *std::move(started);
      port = server->port();
      if (o.master_port != 0 || attempt == 20 ||
          (port < 65535 && PortIsFree(port + 1))) {
        break;
      }
      server->Shutdown();
      server.reset();
    }
    if (port >= 65535) {
      std::cerr << "distrun: the store's port " << port
                << " leaves no port above it for torch.distributed's "
                   "MASTER_PORT\n";
      return 1;
    }
    // Ranks whose peer failed wait a moment for distrun's record of it
    // (cc/store/job_failure.h), which comes unless a replacement is allowed.
    if (o.max_replacements == 0 && o.min_ranks == 0) {
      (void)server->state().Set(kFailureRecorderKey, "distrun");
    }
  }

  // Where the ranks' flight records go on a failure (DISTKIT_TRACE_DIR):
  // the user's choice, else <log-dir>/trace, else a directory of this run
  // that is removed afterwards. Read back for one cross-rank summary. This
  // run's own directory is made by the first rank that writes a record
  // (FlightRecorder::Dump), so a distrun killed outright (SIGKILL, which it
  // cannot clean up after) leaves nothing behind when no rank failed. Its
  // name has a random part: nobody can make it first in a shared /tmp.
  std::string trace_dir = env.Get("DISTKIT_TRACE_DIR").value_or("");
  bool own_trace_dir = false;
  if (trace_dir.empty()) {
    own_trace_dir = o.log_dir.empty();
    if (own_trace_dir) {
      trace_dir = absl::StrCat(TempDir(), "/distrun-trace-", getpid(), "-",
                               RandomToken().substr(0, 16));
    } else {
      trace_dir = absl::StrCat(o.log_dir, "/trace");
      mkdir(trace_dir.c_str(), 0755);
    }
  }

  const int world_size = o.nnodes * o.nproc_per_node;
  // The store's host:port, an IPv6 address in brackets ("fd00::1:29500"
  // would be another address, without a port).
  const std::string store_address = JoinHostPort(o.master_addr, port);
  // --cpu-bind core: the CPUs this process may use, in order; none when
  // there are fewer than local ranks (each would share, and the scheduler
  // could no longer spread them).
  std::vector<int> bind_to;
  if (o.bind_cores) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &allowed)) bind_to.push_back(c);
      }
    }
    if (static_cast<int>(bind_to.size()) < o.nproc_per_node) {
      std::cerr << "distrun: --cpu-bind core: " << o.nproc_per_node
                << " local ranks, " << bind_to.size() << " CPUs; not binding\n";
      bind_to.clear();
    }
  }
  std::vector<RankProcess> ranks;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Environment rank_env = env;
    const int rank = o.node_rank * o.nproc_per_node + local;
    rank_env.Set("RANK", absl::StrCat(rank));
    rank_env.Set("LOCAL_RANK", absl::StrCat(local));
    rank_env.Set("WORLD_SIZE", absl::StrCat(world_size));
    rank_env.Set("LOCAL_WORLD_SIZE", absl::StrCat(o.nproc_per_node));
    rank_env.Set("GROUP_RANK", absl::StrCat(o.node_rank));
    rank_env.Set("NODE_RANK", absl::StrCat(o.node_rank));
    rank_env.Set("MASTER_ADDR", o.master_addr);
    // torch.distributed's (env://), left free; distkit's store is
    // DISTKIT_STORE's, which wins for every launcher (launcher.h).
    rank_env.Set("MASTER_PORT", absl::StrCat(port + 1));
    rank_env.Set("DISTKIT_STORE", store_address);
    rank_env.Set("DISTKIT_TOKEN", token);
    rank_env.Set("DISTKIT_TRACE_DIR", trace_dir);
    // As torchrun does: several ranks per node should not each start one
    // OpenMP thread per core. Python output should reach the log promptly.
    if (!env.Has("OMP_NUM_THREADS") && o.nproc_per_node > 1) {
      rank_env.Set("OMP_NUM_THREADS", "1");
    }
    if (!env.Has("PYTHONUNBUFFERED")) rank_env.Set("PYTHONUNBUFFERED", "1");
    // What the job may do when a rank fails (distkit.elastic reads them):
    // this distrun's flags, never values inherited from an outer one (a
    // nested job's ranks would wait for replacements nobody starts).
    if (o.max_replacements > 0) {
      rank_env.Set("DISTKIT_MAX_REPLACEMENTS",
                   absl::StrCat(o.max_replacements));
    }
    if (o.min_ranks > 0) {
      rank_env.Set("DISTKIT_MIN_RANKS", absl::StrCat(o.min_ranks));
    }
    RankProcess p;
    p.rank = rank;
    if (!bind_to.empty()) p.cpu = bind_to[local];
    p.argv = o.programs.size() == 1 ? o.programs[0] : o.programs[local];
    for (const auto& [k, v] : rank_env.vars()) {
      // Only a replacement started below is one (not the ranks of a distrun
      // that runs inside a replaced rank).
      if (k == "DISTKIT_REPLACEMENT") continue;
      if (k == "DISTKIT_MAX_REPLACEMENTS" && o.max_replacements == 0) continue;
      if (k == "DISTKIT_MIN_RANKS" && o.min_ranks == 0) continue;
      p.env.push_back(absl::StrCat(k, "=", v));
    }
    ranks.push_back(std::move(p));
  }

  // --timeout bounds the whole run, the exit barrier included.
  const absl::Time started = absl::Now();
  SupervisorOptions so;
  so.timeout = o.timeout;
  so.grace_period = o.grace_period;
  so.log_dir = o.log_dir;
  std::atomic<bool> store_unreached{false};  // by a failure notice
  so.on_rank_failed = JobFailureNotice(server.get(), store_address, token,
                                       o.node_rank, &store_unreached);
  so.notice_period = kJobFailureNoticePeriod;
  if (o.max_replacements > 0) {
    so.replace = ReplacementBudget(server.get(), store_address, token,
                                   o.node_rank, o.max_replacements);
  }
  if (o.min_ranks > 0) {
    so.release = LostRankBudget(server.get(), store_address, token, o.node_rank,
                                world_size, o.min_ranks);
  }
  int code = SuperviseRanks(ranks, so);
  ExitSignals signals;
  if (o.nnodes > 1) {
    ExitBarrierOptions barrier{store_address, token, o.nnodes, o.node_rank,
                               o.exit_barrier_timeout};
    // Node 0's wait gets what is left of --timeout where that is less: a
    // node that has not reported by then makes the job a timeout (124), as
    // a rank still running would, instead of holding the store open longer.
    bool bounded_by_job = false;
    if (o.timeout > absl::ZeroDuration()) {
      const absl::Duration left =
          std::max(absl::Seconds(1), o.timeout - (absl::Now() - started));
      if (left < barrier.timeout) {
        barrier.timeout = left;
        bounded_by_job = true;
      }
    }
    if (o.node_rank != 0) {
      // Node 0's store could not be reached moments ago (a cut link, node
      // 0 gone): a short try rather than 5 s more of this node's exit.
      if (store_unreached.load())
        barrier.report_timeout = kReportAfterUnreached;
      // A signal since the ranks ended is this node's result, so node 0
      // (the job's exit) hears it rather than a success.
      const absl::Status s = ReportNodeDone(barrier, [&] {
        code = signals.Apply(code, "before reporting to node 0");
        return code;
      });
      if (!s.ok()) {
        Tell(absl::StrCat(
            "distrun: node ", o.node_rank,
            " could not report its ranks done to node 0's store: ", s.message(),
            "\n"));
      }
    } else if (code == 0) {
      barrier.cancelled = [&] { return signals.Came(); };
      Tell(absl::StrCat(
          "distrun: waiting up to ", absl::FormatDuration(barrier.timeout),
          " for the other nodes' ranks to finish (exit barrier)\n"));
      absl::StatusOr<NodeReports> reports = WaitForNodes(barrier);
      if (reports.ok() && reports->exit_code != 0) {
        Tell(absl::StrCat("distrun: node ", reports->failed_node,
                          " reported exit code ", reports->exit_code,
                          "; the job exits with it\n"));
        code = reports->exit_code;
      } else if (!reports.ok()) {
        const absl::Status& s = reports.status();
        Tell(absl::StrCat("distrun: closing the store: ", s.message(), "\n"));
        if (absl::IsCancelled(s) && signals.signal() != 0) {
          code = signals.Apply(code, "in the exit barrier");
        } else if (absl::IsAborted(s)) {
          // A rank elsewhere failed after this node's ranks ended (the
          // job's failure record ended the wait): not the job's success.
          code = 1;
        } else if (bounded_by_job && absl::IsDeadlineExceeded(s)) {
          Tell(absl::StrCat("distrun: timed out after ",
                            absl::FormatDuration(o.timeout),
                            " (--timeout) in the exit barrier\n"));
          code = kTimeoutExitCode;
        }
      }
    }
  }
  if (server != nullptr) server->Shutdown();
  if (code != 0) Tell(SummarizeTraces(trace_dir));
  if (own_trace_dir) RemoveTree(trace_dir);
  if (std::optional<std::string> prefix = env.Get("DISTKIT_TIMELINE")) {
    const std::string merged = MergeTimelines(*prefix);
    if (!merged.empty())
      Tell(absl::StrCat("distrun: timeline in ", merged, "\n"));
  }
  return signals.Final(code, "after the ranks ended");
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) { return distkit::Main(argc, argv); }
