// Registers "gloo": Gloo's TCP transport, wrapped by the shared-memory path
// when every rank of the group is on this host (cc/comm/shm).
#include <memory>

#include "cc/comm/backend_registry.h"
#include "cc/comm/gloo/gloo_backend.h"
#include "cc/comm/shm/shm_backend.h"
#include "cc/core/status.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeGloo(const BackendConfig& config) {
  BackendConfig tcp = config;
  tcp.store = std::make_shared<PrefixStore>("tcp", config.store);
  // Where shared memory carries the collectives, Gloo's pairs are connected
  // only when something needs them (send / recv, the operations shared
  // memory hands to Gloo): a same-host group opens no TCP connection first.
  return ShmBackend::MaybeWrap(
      std::make_shared<PrefixStore>("shm", config.store), config.rank,
      config.size,
      [&tcp](bool wrapped) -> absl::StatusOr<std::unique_ptr<Backend>> {
        DK_ASSIGN_OR_RETURN(std::unique_ptr<GlooBackend> gloo,
                            GlooBackend::Create(tcp, wrapped));
        return std::unique_ptr<Backend>(std::move(gloo));
      },
      config.timeout);
}

const bool registered = RegisterBackend("gloo", MakeGloo);

}  // namespace
}  // namespace distkit
