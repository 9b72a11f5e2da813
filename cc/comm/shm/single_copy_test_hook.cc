// The test library's hook (single_copy_test_hook.h): linked only into test
// programs, never into //cc/comm/shm:shm.

#include "cc/comm/shm/single_copy_test_hook.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace distkit {
namespace {

// Waits until `path` exists or `limit` has passed.
void AwaitFile(const std::string& path, absl::Duration limit) {
  const absl::Time until = absl::Now() + limit;
  while (access(path.c_str(), F_OK) != 0 && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

class EnvironmentHook : public SingleCopyTestHook {
 public:
  absl::Status InWindow(int peer, bool write) override {
    if (peer != peer_ || write != write_) return absl::OkStatus();
    if (!pause_) {
      AwaitFile(wait_for_, absl::Seconds(10));
      if (!failed_.empty()) {
        const int fd = open(failed_.c_str(), O_CREAT | O_WRONLY, 0600);
        if (fd >= 0) close(fd);
      }
      return absl::UnavailableError(
          "DISTKIT_SHM_TEST_COPY_HOOK failed the read");
    }
    if (done_) return absl::OkStatus();
    done_ = true;
    if (stop_) {
      // <entered> holds this process's pid, whole once it exists.
      const std::string tmp = entered_ + ".tmp";
      FILE* f = std::fopen(tmp.c_str(), "w");
      if (f != nullptr) {
        std::fprintf(f, "%d\n", static_cast<int>(getpid()));
        std::fclose(f);
        std::rename(tmp.c_str(), entered_.c_str());
      }
      raise(SIGSTOP);  // until another process continues it
      return absl::OkStatus();
    }
    const int fd = open(entered_.c_str(), O_CREAT | O_WRONLY, 0600);
    if (fd >= 0) close(fd);
    AwaitFile(wait_for_, hold_);
    return absl::OkStatus();
  }

  bool write_ = false;  // which copies: writes into peer_, or reads of it
  int peer_ = -1;
  bool pause_ = false;  // pause or stop (write), or fail (read)
  bool stop_ = false;   // stop (SIGSTOP), not pause
  std::string wait_for_;
  std::string entered_;
  std::string failed_;  // a failed read creates it (if named)
  absl::Duration hold_ = absl::Seconds(1);  // a pause's longest
  bool done_ = false;                       // a pause happens once
};

// Installed for every program that links this library.
[[maybe_unused]] const bool kInstalled =
    (SingleCopyTestHook::Install(&SingleCopyTestHookFromEnvironment), true);

}  // namespace

std::unique_ptr<SingleCopyTestHook> SingleCopyTestHookFromEnvironment() {
  const char* env = std::getenv("DISTKIT_SHM_TEST_COPY_HOOK");
  if (env == nullptr || *env == '\0') return nullptr;
  const std::vector<std::string> f = absl::StrSplit(env, ':');
  auto hook = std::make_unique<EnvironmentHook>();
  const bool read_fail = (f.size() == 4 || (f.size() == 5 && !f[4].empty())) &&
                         f[0] == "read" && f[2] == "fail_after" &&
                         !f[3].empty();
  const bool write_pause = (f.size() == 5 || f.size() == 6) &&
                           f[0] == "write" && f[2] == "pause" &&
                           !f[3].empty() && !f[4].empty();
  const bool write_stop =
      f.size() == 4 && f[0] == "write" && f[2] == "stop" && !f[3].empty();
  int hold_ms = 1000;
  if ((!read_fail && !write_pause && !write_stop) ||
      !absl::SimpleAtoi(f[1], &hook->peer_) ||
      (f.size() == 6 && (!absl::SimpleAtoi(f[5], &hold_ms) || hold_ms < 0))) {
    // Never fatal: a stray variable must not end a process.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      std::fprintf(stderr,
                   "distkit: DISTKIT_SHM_TEST_COPY_HOOK is malformed, "
                   "ignored: %s\n",
                   env);
    }
    return nullptr;
  }
  hook->write_ = write_pause || write_stop;
  hook->pause_ = write_pause || write_stop;
  hook->stop_ = write_stop;
  if (write_pause) hook->wait_for_ = f[4];
  if (read_fail) hook->wait_for_ = f[3];
  if (read_fail && f.size() == 5) hook->failed_ = f[4];
  if (write_pause || write_stop) hook->entered_ = f[3];
  hook->hold_ = absl::Milliseconds(hold_ms);
  return hook;
}

}  // namespace distkit
