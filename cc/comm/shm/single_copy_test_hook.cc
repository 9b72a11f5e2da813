#include "cc/comm/shm/single_copy_test_hook.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
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

}  // namespace

std::unique_ptr<SingleCopyTestHook> SingleCopyTestHook::FromEnvironment() {
  const char* env = std::getenv("DISTKIT_SHM_TEST_COPY_HOOK");
  if (env == nullptr || *env == '\0') return nullptr;
  const std::vector<std::string> f = absl::StrSplit(env, ':');
  auto hook = std::make_unique<SingleCopyTestHook>();
  const bool read_fail =
      f.size() == 4 && f[0] == "read" && f[2] == "fail_after" && !f[3].empty();
  const bool write_pause = f.size() == 5 && f[0] == "write" &&
                           f[2] == "pause" && !f[3].empty() && !f[4].empty();
  if ((!read_fail && !write_pause) || !absl::SimpleAtoi(f[1], &hook->peer_)) {
    std::fprintf(stderr, "DISTKIT_SHM_TEST_COPY_HOOK: malformed: %s\n", env);
    std::abort();
  }
  hook->write_ = write_pause;
  hook->pause_ = write_pause;
  hook->wait_for_ = write_pause ? f[4] : f[3];
  if (write_pause) hook->entered_ = f[3];
  return hook;
}

absl::Status SingleCopyTestHook::InWindow(int peer, bool write) {
  if (peer != peer_ || write != write_) return absl::OkStatus();
  if (!pause_) {
    AwaitFile(wait_for_, absl::Seconds(10));
    return absl::UnavailableError("DISTKIT_SHM_TEST_COPY_HOOK failed the read");
  }
  if (done_) return absl::OkStatus();
  done_ = true;
  const int fd = open(entered_.c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd >= 0) close(fd);
  AwaitFile(wait_for_, absl::Seconds(1));
  return absl::OkStatus();
}

}  // namespace distkit
