#include "cc/comm/shm/peer_liveness.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace distkit {
namespace {

constexpr absl::Duration kBeatInterval = absl::Milliseconds(100);
// A watcher that itself did not look for this long (descheduled, stopped
// with the whole job) restarts its count instead of blaming the peer.
constexpr absl::Duration kWatcherGap = absl::Seconds(1);

uint64_t PidNamespace() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
}

absl::Duration HeartbeatTimeout() {
  static const absl::Duration timeout = [] {
    const char* env = std::getenv("DISTKIT_HEARTBEAT_TIMEOUT");
    double seconds = 60;
    if (env != nullptr && !absl::SimpleAtod(env, &seconds)) seconds = 60;
    return seconds <= 0 ? absl::InfiniteDuration() : absl::Seconds(seconds);
  }();
  return timeout;
}

// The process's heartbeat thread and the records it advances. Leaked on
// purpose: it runs until the process ends, and static destruction must not
// race with a beat.
class Heart {
 public:
  static Heart& Get() {
    static Heart* heart = new Heart();
    return *heart;
  }
  void Add(LivenessRecord* r) {
    absl::MutexLock lock(&mu_);
    records_.push_back(r);
    if (!started_) {
      started_ = true;
      std::thread([this] { Run(); }).detach();
    }
  }
  void Remove(LivenessRecord* r) {
    absl::MutexLock lock(&mu_);  // after this, no beat touches `r`
    records_.erase(std::remove(records_.begin(), records_.end(), r),
                   records_.end());
  }

 private:
  void Run() {
    pthread_setname_np(pthread_self(), "dk-heartbeat");  // ps and tests
    while (true) {
      absl::SleepFor(kBeatInterval);
      absl::MutexLock lock(&mu_);
      for (LivenessRecord* r : records_)
        r->heartbeat.fetch_add(1, std::memory_order_relaxed);
    }
  }
  absl::Mutex mu_;
  std::vector<LivenessRecord*> records_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
};

// The state letter of a /proc stat file ('R', 'S', 'T', 'Z', ...); 0 when
// unreadable.
char StatState(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t paren = line.rfind(')');  // the name may contain spaces
  if (paren == std::string::npos || paren + 2 >= line.size()) return 0;
  return line[paren + 2];
}

// 'Z' (zombie) or 'X' (dead) from /proc/<pid>/stat; 0 when unreadable.
char ProcessState(int pid) {
  return StatState(absl::StrCat("/proc/", pid, "/stat"));
}

}  // namespace

uint64_t ThisPidNamespace() {
  static const uint64_t mine = PidNamespace();
  return mine;
}

void ClaimLivenessRecord(LivenessRecord* mine) {
  // The namespace first: a watcher that sees the pid trusts it.
  mine->pid_namespace.store(ThisPidNamespace());
  mine->pid.store(getpid());
}

void StartHeartbeat(LivenessRecord* mine) {
  ClaimLivenessRecord(mine);
  mine->heartbeat.store(1);
  Heart::Get().Add(mine);
}

void ClaimWithoutHeartbeat(LivenessRecord* mine) {
  ClaimLivenessRecord(mine);
  mine->heartbeat.store(kNoHeartbeat);
}

void StopHeartbeat(LivenessRecord* mine) { Heart::Get().Remove(mine); }

std::optional<PeerGone> PeerWatch::Gone(const LivenessRecord& peer) {
  const int pid = peer.pid.load();
  if (pid <= 0) return std::nullopt;  // not attached yet
  static const uint64_t my_namespace = PidNamespace();
  if (peer.pid_namespace.load() == my_namespace) {
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      return PeerGone{true, absl::StrCat("(pid ", pid, ") exited")};
    }
    const char state = ProcessState(pid);
    if (state == 'Z' || state == 'X') {
      return PeerGone{true, absl::StrCat("(pid ", pid,
                                         ") exited (a zombie not yet reaped)")};
    }
  }
  const absl::Time now = absl::Now();
  const int64_t beat = peer.heartbeat.load(std::memory_order_relaxed);
  if (beat == kNoHeartbeat) return std::nullopt;
  if (beat != last_beat_ || now - last_look_ > kWatcherGap) {
    last_beat_ = beat;
    beat_seen_changing_ = now;
  }
  last_look_ = now;
  if (now - beat_seen_changing_ > HeartbeatTimeout()) {
    return PeerGone{
        false, absl::StrCat("(pid ", pid, ") has shown no heartbeat for ",
                            absl::FormatDuration(now - beat_seen_changing_),
                            " (frozen, or dead; DISTKIT_HEARTBEAT_TIMEOUT)")};
  }
  return std::nullopt;
}

bool PeerStopped(const LivenessRecord& peer) {
  const int pid = peer.pid.load();
  if (pid <= 0 || peer.pid_namespace.load() != ThisPidNamespace()) {
    return false;
  }
  // Every thread: the one copying may be any of them, and a debugger may
  // stop some threads only.
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = opendir(tasks.c_str());
  if (dir == nullptr) return false;
  int stopped = 0;
  bool other = false;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const char state = StatState(absl::StrCat(tasks, "/", e->d_name, "/stat"));
    if (state == 'T' || state == 't') {
      ++stopped;
    } else if (state != 0) {  // 0: the thread ended meanwhile
      other = true;
      break;
    }
  }
  closedir(dir);
  return stopped > 0 && !other;
}

}  // namespace distkit
