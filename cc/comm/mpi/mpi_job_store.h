// The job's store for a job MPI started without naming one (mpirun, no
// MASTER_ADDR): rank 0 of MPI_COMM_WORLD serves it, and MPI itself tells the
// others where it listens and the job's token, so every rank reaches one
// store as in a job with MASTER_ADDR. What needs a store shared across
// ranks then works there too: torch.distributed's new_group (its
// store-based barrier, a subgroup's rendezvous), distkit's group
// bookkeeping, the job watch.
//
// Three collectives over MPI_COMM_WORLD: an all-gather of hostnames (rank 0
// listens on 127.0.0.1 when every rank has its hostname, else on every
// address), a broadcast of the token, the port and rank 0's IPv4 addresses,
// and, once each rank has tried them (127.0.0.1 first on rank 0's host;
// each address proven by the store's handshake, a wrong one given up within
// 2 s), an all-gather of who reached the store. Where some rank reached
// none (TCP between hosts blocked where MPI's own transport works), every
// rank falls back to a store of its own, as before this existed, and says
// so: the MPI backend needs no shared store, only what is named above does.

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
  std::shared_ptr<Store> store;         // this rank's
  std::unique_ptr<StoreServer> server;  // rank 0's when shared; else null
  bool shared = false;                  // one store for the job
  std::string address;                  // host:port reached, when shared
};

// Collective over MPI_COMM_WORLD (initializing MPI first): `rank` and
// `size` are the launcher's, checked against MPI's on every rank alike.
// Bounded by `timeout`; reaching the store, by a minute at most.
absl::StatusOr<MpiJobStore> ConnectJobStoreOverMpi(int rank, int size,
                                                   absl::Duration timeout);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_MPI_MPI_JOB_STORE_H_
