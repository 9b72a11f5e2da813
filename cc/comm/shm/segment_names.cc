#include "cc/comm/shm/segment_names.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cc/comm/shm/peer_liveness.h"

namespace distkit {
namespace {

constexpr char kPrefix[] = "distkit-";

// Whether `pid` (of this pid namespace) still runs: not gone, not a zombie.
bool Runs(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return true;  // unreadable: assume it runs
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace

std::string NewSegmentName() {
  std::random_device rd;
  return absl::StrCat("/", kPrefix, getpid(), "-", ThisPidNamespace(), "-",
                      rd(), rd());
}

int RemoveOrphanSegments() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  std::vector<std::string> orphans;
  while (dirent* e = readdir(dir)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, kPrefix)) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
    int pid = 0;
    uint64_t ns = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0 ||
        !absl::SimpleAtoi(parts[1], &ns) || ns != ThisPidNamespace()) {
      continue;
    }
    if (!Runs(pid)) orphans.push_back(absl::StrCat("/", e->d_name));
  }
  closedir(dir);
  int removed = 0;
  for (const std::string& o : orphans) removed += shm_unlink(o.c_str()) == 0;
  return removed;
}

}  // namespace distkit
