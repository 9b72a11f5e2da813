// The OpenMPI entry points and predefined handles the MPI backend uses,
// resolved from libmpi.so.40 with dlopen when MPI is first initialized
// (cc/core/shared_library.h), so that libdistkit.so loads without OpenMPI
// and a rank process that never uses MPI never pays for it: libmpi and the
// seven libraries it brings cost every process about 2 ms of start-up here
// (1.5-3.7 ms in alternated runs), hundreds of ranks a host at a time.
//
// Compiled against OpenMPI's mpi.h for the types. Its predefined handles
// (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, ...) are addresses of libmpi's
// globals, so they come from the loaded library too (the fields below),
// never from mpi.h's macros, which would make libmpi a link dependency
// again (capi/abi_symbols_test.sh checks that it is not one). They are
// taken as the loader binds them: a program linked with libmpi that names
// one holds its own copy, and libmpi uses that copy.
//
// Made global (RTLD_GLOBAL) once every entry point was found: OpenMPI loads
// its own components (mca_*.so) with dlopen, and they resolve libmpi's
// symbols from the global scope. DISTKIT_MPI_LIBRARY names an exact file;
// else a libmpi.so.40 already loaded, MPI_HOME's and OPAL_PREFIX's lib
// directories and the loader path, in that order.

#ifndef DISTKIT_CC_COMM_MPI_MPI_LIBRARY_H_
#define DISTKIT_CC_COMM_MPI_MPI_LIBRARY_H_

#include <mpi.h>

#include <string>

#include "absl/status/statusor.h"

namespace distkit {

struct MpiLibrary {
  std::string path;  // where libmpi was found

  // Initialization and the world.
  decltype(&::MPI_Initialized) Initialized;
  decltype(&::MPI_Init_thread) InitThread;
  decltype(&::MPI_Query_thread) QueryThread;
  decltype(&::MPI_Finalized) Finalized;
  decltype(&::MPI_Finalize) Finalize;
  decltype(&::MPI_Error_string) ErrorString;
  // Communicators and groups.
  decltype(&::MPI_Comm_rank) CommRank;
  decltype(&::MPI_Comm_size) CommSize;
  decltype(&::MPI_Comm_set_errhandler) CommSetErrhandler;
  decltype(&::MPI_Comm_split) CommSplit;
  decltype(&::MPI_Comm_group) CommGroup;
  decltype(&::MPI_Comm_create_group) CommCreateGroup;
  decltype(&::MPI_Comm_idup) CommIdup;
  decltype(&::MPI_Comm_free) CommFree;
  decltype(&::MPI_Group_incl) GroupIncl;
  decltype(&::MPI_Group_free) GroupFree;
  // Types and user reductions (float16, bfloat16, bool).
  decltype(&::MPI_Type_contiguous) TypeContiguous;
  decltype(&::MPI_Type_commit) TypeCommit;
  decltype(&::MPI_Op_create) OpCreate;
  // The nonblocking operations and their completion.
  decltype(&::MPI_Test) Test;
  // Withdraws a receive whose operation gave up (never a collective's).
  decltype(&::MPI_Cancel) Cancel;
  decltype(&::MPI_Iallreduce) Iallreduce;
  decltype(&::MPI_Ibcast) Ibcast;
  decltype(&::MPI_Ireduce) Ireduce;
  decltype(&::MPI_Iallgather) Iallgather;
  decltype(&::MPI_Igather) Igather;
  decltype(&::MPI_Iscatter) Iscatter;
  decltype(&::MPI_Ireduce_scatter_block) IreduceScatterBlock;
  decltype(&::MPI_Ialltoall) Ialltoall;
  decltype(&::MPI_Ialltoallv) Ialltoallv;
  decltype(&::MPI_Isend) Isend;
  decltype(&::MPI_Irecv) Irecv;

  // The predefined handles mpi.h's macros name.
  MPI_Comm comm_world, comm_null;
  MPI_Group group_null;
  MPI_Errhandler errors_return;
  MPI_Datatype datatype_null, byte, float32, float64, int8, uint8, uint16,
      int32, int64;
  MPI_Op op_null, sum, prod, min, max, band, bor, bxor;
};

// The process's OpenMPI, loaded once (thread-safe); FAILED_PRECONDITION
// saying what was tried when it cannot be loaded or lacks a symbol.
absl::StatusOr<const MpiLibrary*> LoadMpiLibrary();

// The library LoadMpiLibrary loaded. Only after it succeeded: every MPI call
// is made after EnsureMpi (mpi_runtime.h), which loads it first.
const MpiLibrary& Mpi();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_MPI_MPI_LIBRARY_H_
