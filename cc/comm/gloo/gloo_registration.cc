// Registers "gloo": Gloo's TCP transport, with the shared-memory path when
// every rank of the group is on this host (cc/comm/shm) and the
// hierarchical path when the group spans hosts (hierarchical_backend.h).
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/gloo/gloo_backend.h"
#include "cc/comm/hierarchical/hierarchical_backend.h"
#include "cc/comm/shm/host_map.h"
#include "cc/comm/shm/shm_backend.h"
#include "cc/core/status.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

bool Disabled(const char* variable) {
  const char* env = std::getenv(variable);
  return env != nullptr && std::string(env) == "0";
}

std::shared_ptr<Store> Prefixed(const std::string& prefix,
                                std::shared_ptr<Store> store) {
  return std::make_shared<PrefixStore>(prefix, std::move(store));
}

// Gloo over `config`'s ranks; connect_on_demand: pairs connect when first
// used, not at creation.
absl::StatusOr<std::unique_ptr<Backend>> Tcp(const BackendConfig& config,
                                             bool connect_on_demand) {
  DK_ASSIGN_OR_RETURN(std::unique_ptr<GlooBackend> gloo,
                      GlooBackend::Create(config, connect_on_demand));
  return std::unique_ptr<Backend>(std::move(gloo));
}

// Gloo's TCP for every collective of the group.
absl::StatusOr<std::unique_ptr<Backend>> FlatTcp(const BackendConfig& config) {
  BackendConfig tcp = config;
  tcp.store = Prefixed("tcp", config.store);
  return Tcp(tcp, /*connect_on_demand=*/false);
}

// Shared memory over `config`'s ranks (all on this host), wrapping Gloo for
// send / recv, or Gloo alone where no segment can be made.
absl::StatusOr<std::unique_ptr<Backend>> SameHost(const BackendConfig& config) {
  BackendConfig tcp = config;
  tcp.store = Prefixed("tcp", config.store);
  // The listen address is chosen now, so that a wrong DISTKIT_SOCKET_IFNAME
  // still fails the group's creation on every rank, not a first send.
  DK_ASSIGN_OR_RETURN(tcp.hostname, GlooBackend::ListenHostname(tcp));
  // Where shared memory carries the collectives, Gloo is made, and its
  // pairs connected, only when something needs them (send / recv): a
  // same-host group has no Gloo thread or TCP connection first. The factory may
  // run then, after this call: it holds its own copy of the config.
  return ShmBackend::MaybeWrap(
      Prefixed("shm", config.store), config.rank, config.size,
      [tcp](bool wrapped) { return Tcp(tcp, wrapped); }, config.timeout,
      config.names);
}

absl::StatusOr<std::unique_ptr<Backend>> Hierarchical(
    const BackendConfig& config, HostMap hosts) {
  const int host = hosts.host_of[config.rank];
  const int local_rank = hosts.LocalIndex(config.rank);
  std::unique_ptr<Backend> local;
  if (hosts.ranks[host].size() > 1) {
    BackendConfig c = config;
    c.store = Prefixed(absl::StrCat("host", host), config.store);
    c.rank = local_rank;
    c.size = static_cast<int>(hosts.ranks[host].size());
    // The parts number their ranks from 0; messages name the group's.
    c.names = config.names.Subset(hosts.ranks[host]);
    if (Disabled("DISTKIT_TEST_HOST_SHM")) {
      // For tests: the host's group on Gloo's TCP, as where no segment can
      // be mapped (a small /dev/shm, or more ranks than shared memory
      // takes), which a sandbox cannot otherwise arrange.
      c.store = Prefixed("tcp", c.store);
      DK_ASSIGN_OR_RETURN(local, Tcp(c, /*connect_on_demand=*/false));
    } else {
      DK_ASSIGN_OR_RETURN(local, SameHost(c));
    }
  }
  std::unique_ptr<Backend> leaders;
  if (local_rank == 0) {
    BackendConfig c = config;
    c.store = Prefixed("leaders", config.store);
    c.rank = host;
    c.size = hosts.hosts();
    std::vector<int> leader_ranks;
    for (const std::vector<int>& ranks : hosts.ranks) {
      leader_ranks.push_back(ranks[0]);
    }
    c.names = config.names.Subset(leader_ranks);
    DK_ASSIGN_OR_RETURN(leaders, Tcp(c, /*connect_on_demand=*/false));
  }
  BackendConfig c = config;
  c.store = Prefixed("tcp", config.store);
  DK_ASSIGN_OR_RETURN(std::unique_ptr<Backend> everyone,
                      Tcp(c, /*connect_on_demand=*/true));
  return std::unique_ptr<Backend>(
      new HierarchicalBackend(config.rank, std::move(hosts), std::move(local),
                              std::move(leaders), std::move(everyone)));
}

absl::StatusOr<std::unique_ptr<Backend>> MakeGloo(const BackendConfig& config) {
  if (config.size < 2) return FlatTcp(config);
  // Rank 0's DISTKIT_SHM and DISTKIT_HIERARCHICAL decide for every rank:
  // ranks that chose different paths would each wait in an exchange the
  // others never join, until init's timeout.
  const std::string mine =
      absl::StrCat(Disabled("DISTKIT_SHM") ? "0" : "1",
                   Disabled("DISTKIT_HIERARCHICAL") ? "0" : "1");
  DK_ASSIGN_OR_RETURN(
      HostMap hosts,
      HostMap::Exchange(*Prefixed("hosts", config.store), config.rank,
                        config.size, config.timeout, mine));
  if (hosts.rank0_choices.size() != 2) {
    return absl::InternalError(absl::StrCat(
        "gloo: rank 0's path choices '", hosts.rank0_choices, "' malformed"));
  }
  const bool shared_memory = hosts.rank0_choices[0] == '1';
  const bool hierarchical = hosts.rank0_choices[1] == '1';
  // DISTKIT_SHM=0: Gloo's TCP for everything, on one host or many. One rank
  // per host (nothing to share), or DISTKIT_HIERARCHICAL=0: flat.
  if (!shared_memory ||
      (hosts.hosts() > 1 && (hosts.hosts() == config.size || !hierarchical))) {
    return FlatTcp(config);
  }
  if (hosts.hosts() == 1) return SameHost(config);
  return Hierarchical(config, std::move(hosts));
}

const bool registered = RegisterBackend("gloo", MakeGloo);

}  // namespace
}  // namespace distkit
