#include "cc/comm/rank_names.h"

#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace distkit {

RankNames::RankNames(std::vector<int> world_ranks) {
  for (int r = 0; r < static_cast<int>(world_ranks.size()); ++r) {
    if (world_ranks[r] != r) {
      world_ = std::move(world_ranks);
      break;
    }
  }
}

RankNames RankNames::Subset(const std::vector<int>& ranks) const {
  RankNames inner;
  inner.world_ = world_;
  for (int r : ranks) inner.group_.push_back(GroupRank(r));
  return inner;
}

int RankNames::GroupRank(int r) const {
  return r >= 0 && r < static_cast<int>(group_.size()) ? group_[r] : r;
}

std::string RankNames::Rank(int r) const {
  const int g = GroupRank(r);
  if (g >= 0 && g < static_cast<int>(world_.size())) {
    return absl::StrCat("rank ", g, " (world rank ", world_[g], ")");
  }
  return absl::StrCat("rank ", g);
}

std::string RankNames::Here(int r) const {
  return absl::StrCat(Rank(r), " on host ", HostName());
}

std::string HostName() {
  if (const char* declared = std::getenv("DISTKIT_HOST_ID")) {
    if (*declared != '\0') return declared;
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace distkit
