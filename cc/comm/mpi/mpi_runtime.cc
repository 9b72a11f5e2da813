#include "cc/comm/mpi/mpi_runtime.h"

#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cc/comm/mpi/mpi_library.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

absl::once_flag init_once;
absl::Status init_status;
std::atomic<bool> request_abandoned{false};

void FinalizeAtExit() {
  const MpiLibrary& mpi = Mpi();
  int finalized = 0;
  mpi.Finalized(&finalized);
  // A request left pending by a timeout or abort could make MPI_Finalize
  // wait forever: skip it then (mpirun reports the abnormal exit).
  if (!finalized && !request_abandoned.load()) mpi.Finalize();
}

void InitializeMpi() {
  absl::StatusOr<const MpiLibrary*> loaded = LoadMpiLibrary();
  if (!loaded.ok()) {
    init_status = absl::FailedPreconditionError(
        absl::StrCat("mpi: ", loaded.status().message()));
    return;
  }
  const MpiLibrary& mpi = **loaded;
  int initialized = 0;
  DK_MPI(mpi.Initialized(&initialized));
  int provided = 0;
  if (!initialized) {
    if (DK_MPI(mpi.InitThread(nullptr, nullptr, MPI_THREAD_MULTIPLE,
                              &provided)) != MPI_SUCCESS) {
      init_status = absl::UnavailableError("MPI_Init_thread failed");
      return;
    }
    std::atexit(FinalizeAtExit);
  } else {
    mpi.QueryThread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    init_status = absl::FailedPreconditionError(absl::StrCat(
        "the MPI library provides thread level ", provided,
        ", distkit needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"));
    return;
  }
  // Errors come back as codes, never abort the job from inside a call.
  mpi.CommSetErrhandler(mpi.comm_world, mpi.errors_return);
}

}  // namespace

absl::Mutex& MpiMutex() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}

absl::Status EnsureMpi(absl::Duration timeout) {
  // MPI_Init_thread has no timeout of its own: with a peer frozen or gone
  // before its init, it waits forever. It runs on a thread of its own, and
  // the caller waits at most `timeout` (a later call waits again).
  static absl::Mutex* mu = new absl::Mutex;
  static bool started = false, done = false;
  absl::MutexLock lock(mu);
  if (!started) {
    started = true;
    std::thread([] {
      absl::call_once(init_once, InitializeMpi);
      absl::MutexLock done_lock(mu);
      done = true;
    }).detach();
  }
  if (!mu->AwaitWithTimeout(absl::Condition(&done), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("mpi: MPI_Init_thread did not complete within ",
                     absl::FormatDuration(timeout),
                     ": a rank of the job is frozen, gone or was never started "
                     "(MPI's own init has no timeout)"));
  }
  return init_status;
}

absl::StatusOr<std::pair<int, int>> MpiWorldRankAndSize(
    absl::Duration timeout) {
  DK_RETURN_IF_ERROR(EnsureMpi(timeout));
  const MpiLibrary& mpi = Mpi();
  int rank = 0, size = 0;
  mpi.CommRank(mpi.comm_world, &rank);
  mpi.CommSize(mpi.comm_world, &size);
  return std::make_pair(rank, size);
}

absl::Status MpiWorldCollective(const char* what,
                                absl::FunctionRef<int(MPI_Request*)> start,
                                absl::Duration timeout) {
  const MpiLibrary& mpi = Mpi();
  const absl::Time deadline = absl::Now() + timeout;
  MPI_Request request = nullptr;
  int rc = DK_MPI(start(&request));
  while (rc == MPI_SUCCESS) {
    int done = 0;
    rc = DK_MPI(mpi.Test(&request, &done, MPI_STATUS_IGNORE));
    if (rc == MPI_SUCCESS && done) return absl::OkStatus();
    if (absl::Now() > deadline) {
      MarkMpiRequestAbandoned();
      return absl::DeadlineExceededError(absl::StrCat(
          "mpi: ", what, " over MPI_COMM_WORLD did not complete within ",
          absl::FormatDuration(timeout),
          ": a rank of the job is frozen, gone or not in it"));
    }
    absl::SleepFor(absl::Microseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat("mpi: ", what, " over MPI_COMM_WORLD: ", MpiError(rc)));
}

void MarkMpiRequestAbandoned() { request_abandoned = true; }

bool MpiRequestAbandoned() { return request_abandoned.load(); }

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  Mpi().ErrorString(rc, text, &len);
  return std::string(text, len);
}

}  // namespace distkit
