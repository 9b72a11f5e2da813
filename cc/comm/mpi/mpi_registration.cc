// Registers "mpi": the world group over MPI_COMM_WORLD (subgroups come from
// the parent's MPI_Comm_split, Backend::Split).
#include <memory>

#include "cc/comm/backend_registry.h"
#include "cc/comm/mpi/mpi_backend.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeMpi(const BackendConfig& config) {
  DK_ASSIGN_OR_RETURN(
      std::unique_ptr<MpiBackend> world,
      MpiBackend::CreateWorld(config.rank, config.size, config.timeout));
  return std::unique_ptr<Backend>(std::move(world));
}

const bool registered = RegisterBackend("mpi", MakeMpi);

}  // namespace
}  // namespace distkit
