#include "cc/comm/shm/host_map.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cc/core/status.h"
#include "cc/store/gather_once.h"

namespace distkit {

std::string HostIdentity() {
  if (const char* declared = std::getenv("DISTKIT_HOST_ID")) {
    if (declared[0] != '\0') return absl::StrCat("declared:", declared);
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return absl::StrCat(host, "/", boot);
}

int HostMap::LocalIndex(int rank) const {
  const std::vector<int>& mine = ranks[host_of[rank]];
  return static_cast<int>(std::lower_bound(mine.begin(), mine.end(), rank) -
                          mine.begin());
}

HostMap HostMap::FromIdentities(const std::vector<std::string>& identities) {
  HostMap map;
  absl::flat_hash_map<std::string, int> index;
  for (int r = 0; r < static_cast<int>(identities.size()); ++r) {
    auto [it, added] = index.try_emplace(identities[r], map.hosts());
    if (added) map.ranks.emplace_back();
    map.host_of.push_back(it->second);
    map.ranks[it->second].push_back(r);
  }
  return map;
}

bool HostMap::ranks_in_host_order() const {
  const size_t n = ranks.empty() ? 0 : ranks[0].size();
  for (size_t h = 0; h < ranks.size(); ++h) {
    if (ranks[h].size() != n) return false;
    for (size_t i = 0; i < n; ++i) {
      if (ranks[h][i] != static_cast<int>(h * n + i)) return false;
    }
  }
  return true;
}

absl::StatusOr<HostMap> HostMap::Exchange(Store& store, int rank, int size,
                                          absl::Duration timeout,
                                          absl::string_view choices) {
  // One rank reads every identity and publishes rank 0's choices and each
  // rank's host index ("<choices>;0,0,1,1"): the same map again from
  // FromIdentities, since hosts are numbered in order of first appearance
  // either way.
  DK_ASSIGN_OR_RETURN(
      std::string answer,
      GatherOnce(
          store, "host/", "host identity", rank, size, HostIdentity(),
          [choices](const std::vector<std::string>& identities) {
            return absl::StrCat(
                choices, ";",
                absl::StrJoin(FromIdentities(identities).host_of, ","));
          },
          timeout));
  const size_t split = answer.find(';');
  if (split == std::string::npos) {
    return absl::InternalError(
        absl::StrCat("host map: malformed answer '", answer, "'"));
  }
  std::vector<std::string> indices =
      absl::StrSplit(absl::string_view(answer).substr(split + 1), ',');
  if (static_cast<int>(indices.size()) != size) {
    return absl::InternalError(absl::StrCat("host map: ", indices.size(),
                                            " entries for ", size, " ranks"));
  }
  HostMap map = FromIdentities(indices);
  map.rank0_choices = answer.substr(0, split);
  return map;
}

}  // namespace distkit
