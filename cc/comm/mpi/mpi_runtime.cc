#include "cc/comm/mpi/mpi_runtime.h"

#include <atomic>
#include <cstdlib>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

absl::once_flag init_once;
absl::Status init_status;
std::atomic<bool> request_abandoned{false};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A request left pending by a timeout or abort could make MPI_Finalize
  // wait forever: skip it then (mpirun reports the abnormal exit).
  if (!finalized && !request_abandoned.load()) MPI_Finalize();
}

void InitializeMpi() {
  int initialized = 0;
  DK_MPI(MPI_Initialized(&initialized));
  int provided = 0;
  if (!initialized) {
    if (DK_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE,
                               &provided)) != MPI_SUCCESS) {
      init_status = absl::UnavailableError("MPI_Init_thread failed");
      return;
    }
    std::atexit(FinalizeAtExit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    init_status = absl::FailedPreconditionError(absl::StrCat(
        "the MPI library provides thread level ", provided,
        ", distkit needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")"));
    return;
  }
  // Errors come back as codes, never abort the job from inside a call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

}  // namespace

absl::Mutex& MpiMutex() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}

absl::Status EnsureMpi() {
  absl::call_once(init_once, InitializeMpi);
  return init_status;
}

absl::StatusOr<std::pair<int, int>> MpiWorldRankAndSize() {
  DK_RETURN_IF_ERROR(EnsureMpi());
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::make_pair(rank, size);
}

void MarkMpiRequestAbandoned() { request_abandoned = true; }

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, len);
}

}  // namespace distkit
