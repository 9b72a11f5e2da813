// Which host every rank of a group runs on: the fact that decides a group's
// path (shared memory on one host, hierarchical across hosts:
// docs/architecture.md, "Transports and their algorithms").
// A host is named by its hostname and boot id, or by DISTKIT_HOST_ID when
// that is set: ranks that declare different identities are treated as
// being on different hosts, so that one machine can stand in for several
// in tests and benchmarks (two distrun instances, one per "host").

#ifndef DISTKIT_CC_COMM_SHM_HOST_MAP_H_
#define DISTKIT_CC_COMM_SHM_HOST_MAP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc/store/store.h"

namespace distkit {

// DISTKIT_HOST_ID, else "<hostname>/<boot id>".
std::string HostIdentity();

struct HostMap {
  // By rank: the index of its host. Hosts are numbered in the order of
  // their lowest rank, so host 0 holds rank 0.
  std::vector<int> host_of;
  // By host: its ranks, ascending. ranks[h][0] is the host's leader.
  std::vector<std::vector<int>> ranks;

  int hosts() const { return static_cast<int>(ranks.size()); }
  // The position of `rank` among its host's ranks.
  int LocalIndex(int rank) const;
  // Whether every host holds the same number of consecutive ranks (host h
  // ranks [h * n, (h + 1) * n)): rank order is host order.
  bool ranks_in_host_order() const;

  // What rank 0 passed to Exchange as `choices`, the same on every rank: a
  // decision that every rank must make alike (which path the group takes)
  // rides along at no extra store call.
  std::string rank0_choices;

  // Collective over `store`: GatherOnce (cc/store/gather_once.h) of the
  // ranks' identities: two store calls a rank (rank 0: three). `choices`
  // (no ';') counts on rank 0 only.
  static absl::StatusOr<HostMap> Exchange(Store& store, int rank, int size,
                                          absl::Duration timeout,
                                          absl::string_view choices = "");
  // From every rank's identity, in rank order.
  static HostMap FromIdentities(const std::vector<std::string>& identities);
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_HOST_MAP_H_
