// The process-wide OpenMPI state every MPI backend shares: MPI is
// initialized once with MPI_THREAD_MULTIPLE (a group's worker and its
// point-to-point lanes call it from several threads) and finalized at exit,
// and every MPI call goes through one lock, so OpenMPI's progress engine is
// never driven from two threads at once (its shared-memory transport is the
// least tested part under MPI_THREAD_MULTIPLE). Calls are nonblocking, so the
// lock is held briefly. The two blocking calls, MPI_Comm_split (every rank of
// a group, in its order) and MPI_Comm_create_group (a subgroup its members
// alone create, at any point of the parent's order), are made outside it, on
// threads of their own: holding the lock while they wait for the other ranks
// would stop every other operation of this process (those ranks may be
// waiting on one), with no timeout (MpiBackend::Split, CreateAmongMembers);
// one that timed out stays inside MPI, outside the lock, until the process
// exits (its group then makes no more). The quarantine of requests given up
// on (mpi_staging.h) is guarded by this lock too.

#ifndef DISTKIT_CC_COMM_MPI_MPI_RUNTIME_H_
#define DISTKIT_CC_COMM_MPI_MPI_RUNTIME_H_

#include <mpi.h>

#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace distkit {

// Initializes MPI once per process (MPI_THREAD_MULTIPLE, errors returned as
// codes); the status of that first attempt. DEADLINE_EXCEEDED when MPI's
// init has not completed within `timeout` (it waits for every rank of the
// job, with no timeout of its own).
absl::Status EnsureMpi(absl::Duration timeout);

// This process's (rank, size) in MPI_COMM_WORLD; initializes MPI first.
absl::StatusOr<std::pair<int, int>> MpiWorldRankAndSize(absl::Duration timeout);

// One nonblocking collective over MPI_COMM_WORLD (MPI initialized):
// `start(&request)` runs under MpiMutex() and returns MPI's code, then the
// request is polled to completion. DEADLINE_EXCEEDED naming `what` when it
// has not completed within `timeout` (a rank that never calls it): the
// request then stays pending (MarkMpiRequestAbandoned) and MPI may still
// write the buffers `start` named, so they must outlive the process (heap
// memory the caller leaks on that error).
absl::Status MpiWorldCollective(const char* what,
                                absl::FunctionRef<int(MPI_Request*)> start,
                                absl::Duration timeout);

// The lock every MPI call is made under (DK_MPI).
absl::Mutex& MpiMutex();

// A request was left pending (an operation timed out or was aborted):
// MPI_Finalize could wait for it forever, so the exit skips it.
void MarkMpiRequestAbandoned();
// Whether one was.
bool MpiRequestAbandoned();

// MPI's text for an error code.
std::string MpiError(int rc);

}  // namespace distkit

// Runs one MPI call under MpiMutex() and yields its return code.
#define DK_MPI(call)                                      \
  ([&] {                                                  \
    absl::MutexLock dk_mpi_lock_(&::distkit::MpiMutex()); \
    return call;                                          \
  }())

#endif  // DISTKIT_CC_COMM_MPI_MPI_RUNTIME_H_
