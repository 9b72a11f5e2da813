#include "cc/dist_api/job_watch.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/store/call_deadline.h"

namespace distkit {
namespace dist {
namespace {

// The launcher that started this rank, when its variables name one.
std::string LauncherFromEnvironment() {
  auto set = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v;
  };
  if (set("TORCHELASTIC_RUN_ID")) return "torchrun";
  if (set("SLURM_STEP_ID") && set("SLURM_PROCID")) return "srun";
  if (set("OMPI_COMM_WORLD_RANK")) return "mpirun";
  return "";
}

}  // namespace

JobWatch::Options JobWatch::FromEnvironment(std::shared_ptr<Store> remote_store,
                                            std::string store_address) {
  Options options;
  const char* timeout = std::getenv("DISTKIT_STORE_HEARTBEAT_TIMEOUT");
  double seconds = 60;
  if (timeout != nullptr && *timeout) {
    double parsed = 0;
    if (absl::SimpleAtod(timeout, &parsed)) seconds = parsed;
  }
  if (seconds > 0) {
    options.store_timeout = absl::Seconds(seconds);
    options.store = std::move(remote_store);
    options.store_address = std::move(store_address);
  }
  const char* force = std::getenv("DISTKIT_LAUNCHER_WATCH");
  std::string launcher = LauncherFromEnvironment();
  if (force != nullptr && *force) {
    launcher = std::string(force) == "0" ? "" : "launcher";
  }
  // A rank already orphaned (parent 1) at init has no launcher to lose.
  if (!launcher.empty() && getppid() > 1) {
    options.launcher_pid = getppid();
    options.launcher_name = launcher;
  }
  return options;
}

std::unique_ptr<JobWatch> JobWatch::Start(Options options) {
  if (options.store == nullptr && options.launcher_pid == 0) return nullptr;
  std::unique_ptr<JobWatch> watch(new JobWatch(std::move(options)));
  watch->thread_ = std::thread([w = watch.get()] {
    pthread_setname_np(pthread_self(), "dk-job-watch");  // ps and tests
    w->Run();
  });
  return watch;
}

JobWatch::~JobWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool JobWatch::store_closing() const {
  absl::MutexLock lock(&mu_);
  return store_closing_;
}

absl::Status JobWatch::Look(absl::Time& last_answer) {
  if (options_.launcher_pid != 0 && getppid() != options_.launcher_pid) {
    return absl::UnavailableError(absl::StrCat(
        "the ", options_.launcher_name, " that started this rank (pid ",
        options_.launcher_pid, ") is gone"));
  }
  if (options_.store == nullptr || store_closing()) return absl::OkStatus();
  absl::StatusOr<bool> closing = [&] {
    ScopedStoreDeadline ping(absl::Now() + options_.interval);
    return options_.store->Check({std::string(kStoreClosingKey)});
  }();
  if (closing.ok()) {
    last_answer = absl::Now();
    if (*closing) {
      absl::MutexLock lock(&mu_);
      store_closing_ = true;
    }
    return absl::OkStatus();
  }
  if (absl::Now() - last_answer < options_.store_timeout) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "the job's store at ", options_.store_address, " has not answered for ",
      absl::FormatDuration(absl::Now() - last_answer),
      " (DISTKIT_STORE_HEARTBEAT_TIMEOUT) and never said it closes: the "
      "process that hosted it (rank 0 or the launcher) is gone; last error: ",
      closing.status().ToString()));
}

void JobWatch::Run() {
  absl::Time last_answer = absl::Now();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.interval)) {
        return;
      }
    }
    absl::Status lost = Look(last_answer);
    if (lost.ok()) continue;
    if (options_.on_lost) options_.on_lost(lost);
    std::fprintf(stderr, "distkit: %s; stopping this rank (SIGTERM)\n",
                 lost.ToString().c_str());
    std::fflush(stderr);
    kill(getpid(), SIGTERM);
    return;
  }
}

void AnnounceStoreClosing(Store& host_state, int others,
                          absl::Duration interval) {
  if (!host_state.Set(kStoreClosingKey, "1").ok() || others <= 0) return;
  // A watcher sees the key at its next ping, within one interval.
  const absl::Time until = absl::Now() + interval + absl::Milliseconds(500);
  while (absl::Now() < until) {
    absl::StatusOr<int64_t> left = host_state.Add(kRanksLeftKey, 0);
    if (!left.ok() || *left >= others) return;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void CountRankLeft(Store& store) {
  ScopedStoreDeadline bounded(absl::Now() + absl::Milliseconds(500));
  (void)store.Add(kRanksLeftKey, 1);
}

}  // namespace dist
}  // namespace distkit
