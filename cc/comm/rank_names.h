// RankNames: how a backend names ranks in its messages. A backend may serve
// as a part of another, numbering its ranks from 0 (the hierarchical
// backend's group of host leaders and each host's shared-memory group), and
// a group may be a subgroup of the world; a message must still name the ranks
// the user knows: the group's rank, the world's beside it where they differ,
// and the host the rank that reports runs on. Without this a failure among
// the leaders of world ranks 2 and 3 read "rank 1 of 2 could not connect".

#ifndef DISTKIT_CC_COMM_RANK_NAMES_H_
#define DISTKIT_CC_COMM_RANK_NAMES_H_

#include <string>
#include <vector>

namespace distkit {

class RankNames {
 public:
  // This backend's ranks are the group's, and the group is the world.
  RankNames() = default;
  // A group's backend: world_ranks[r] is group rank r's world rank.
  explicit RankNames(std::vector<int> world_ranks);

  // The names of a backend over some of this one's ranks: its rank i is
  // this one's rank ranks[i].
  RankNames Subset(const std::vector<int>& ranks) const;

  // The group rank of this backend's rank r.
  int GroupRank(int r) const;
  // "rank 3", or "rank 1 (world rank 3)" in a subgroup.
  std::string Rank(int r) const;
  // Rank(r) on this process's host: "rank 3 on host node-b".
  std::string Here(int r) const;

 private:
  std::vector<int> group_;  // this backend's rank -> group rank; empty: same
  std::vector<int> world_;  // group rank -> world rank; empty: same
};

// This process's host as messages name it: $DISTKIT_HOST_ID when set (one
// machine standing in for several), else its hostname. No lookup.
std::string HostName();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_RANK_NAMES_H_
