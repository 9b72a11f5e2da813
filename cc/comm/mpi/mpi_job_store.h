// The job's store for a job MPI started without naming one (mpirun, no
// MASTER_ADDR): rank 0 of MPI_COMM_WORLD serves it, and MPI itself
// broadcasts where it listens and the job's token, so every rank reaches one
// store as in a job with MASTER_ADDR. What needs a store shared across
// ranks then works there too: torch.distributed's new_group (its
// store-based barrier, a subgroup's rendezvous), distkit's group
// bookkeeping, the job watch.
//
// Where rank 0 listens: 127.0.0.1 when every rank is on its host
// (OMPI_COMM_WORLD_LOCAL_SIZE is the world's size); else every address, and
// the others try its IPv4 addresses in turn (ranks on its host, by
// hostname, try 127.0.0.1 first). The store asks every connection for the
// token, which only the job's ranks received.

#ifndef DISTKIT_CC_COMM_MPI_MPI_JOB_STORE_H_
#define DISTKIT_CC_COMM_MPI_MPI_JOB_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cc/store/store.h"
#include "cc/store/store_server.h"

namespace distkit {

struct MpiJobStore {
  std::shared_ptr<Store> store;         // this rank's connection
  std::unique_ptr<StoreServer> server;  // rank 0's; null elsewhere
  std::string address;                  // host:port this rank reached
};

// Collective over MPI_COMM_WORLD (initializing MPI first): `rank` and
// `size` are the launcher's, checked against MPI's; `one_host` whether
// every rank runs on this host. Bounded by `timeout`.
absl::StatusOr<MpiJobStore> ConnectJobStoreOverMpi(int rank, int size,
                                                   bool one_host,
                                                   absl::Duration timeout);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_MPI_MPI_JOB_STORE_H_
