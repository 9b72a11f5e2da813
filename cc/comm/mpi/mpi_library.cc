#include "cc/comm/mpi/mpi_library.h"

#include <cassert>

#include "cc/core/shared_library.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

LibrarySearch MpiSearch() {
  LibrarySearch search;
  search.what = "OpenMPI";
  search.soname = "libmpi.so.40";  // OpenMPI 3.0 to 5.x
  search.override_env = "DISTKIT_MPI_LIBRARY";
  for (const char* env : {"MPI_HOME", "OPAL_PREFIX"}) {
    for (std::string& dir : LibDirsFromEnv(env)) {
      search.dirs.push_back(std::move(dir));
    }
  }
  return search;
}

// A predefined handle: the address of libmpi's global `symbol`, as mpi.h's
// OMPI_PREDEFINED_GLOBAL makes it. The one libmpi itself binds to, which
// is the executable's copy where a program linked with libmpi names the
// handle (a copy relocation), so taken from the global scope, not from
// libmpi's handle.
template <typename Handle>
absl::Status ResolveHandle(const char* symbol, Handle* out) {
  DK_ASSIGN_OR_RETURN(void* address, FindGlobalSymbol(symbol));
  *out = reinterpret_cast<Handle>(address);
  return absl::OkStatus();
}

absl::StatusOr<MpiLibrary> Load() {
  DK_ASSIGN_OR_RETURN(SharedLibrary lib, OpenSharedLibrary(MpiSearch()));
  MpiLibrary m;
  m.path = lib.path;
#define DK_RESOLVE(field, symbol) \
  DK_RETURN_IF_ERROR(ResolveSymbol(lib, #symbol, &m.field))
  DK_RESOLVE(Initialized, MPI_Initialized);
  DK_RESOLVE(InitThread, MPI_Init_thread);
  DK_RESOLVE(QueryThread, MPI_Query_thread);
  DK_RESOLVE(Finalized, MPI_Finalized);
  DK_RESOLVE(Finalize, MPI_Finalize);
  DK_RESOLVE(ErrorString, MPI_Error_string);
  DK_RESOLVE(CommRank, MPI_Comm_rank);
  DK_RESOLVE(CommSize, MPI_Comm_size);
  DK_RESOLVE(CommSetErrhandler, MPI_Comm_set_errhandler);
  DK_RESOLVE(CommSplit, MPI_Comm_split);
  DK_RESOLVE(CommGroup, MPI_Comm_group);
  DK_RESOLVE(CommCreateGroup, MPI_Comm_create_group);
  DK_RESOLVE(CommIdup, MPI_Comm_idup);
  DK_RESOLVE(CommFree, MPI_Comm_free);
  DK_RESOLVE(GroupIncl, MPI_Group_incl);
  DK_RESOLVE(GroupFree, MPI_Group_free);
  DK_RESOLVE(TypeContiguous, MPI_Type_contiguous);
  DK_RESOLVE(TypeCommit, MPI_Type_commit);
  DK_RESOLVE(OpCreate, MPI_Op_create);
  DK_RESOLVE(Test, MPI_Test);
  DK_RESOLVE(Cancel, MPI_Cancel);
  DK_RESOLVE(Iallreduce, MPI_Iallreduce);
  DK_RESOLVE(Ibcast, MPI_Ibcast);
  DK_RESOLVE(Ireduce, MPI_Ireduce);
  DK_RESOLVE(Iallgather, MPI_Iallgather);
  DK_RESOLVE(Igather, MPI_Igather);
  DK_RESOLVE(Iscatter, MPI_Iscatter);
  DK_RESOLVE(IreduceScatterBlock, MPI_Ireduce_scatter_block);
  DK_RESOLVE(Ialltoall, MPI_Ialltoall);
  DK_RESOLVE(Ialltoallv, MPI_Ialltoallv);
  DK_RESOLVE(Isend, MPI_Isend);
  DK_RESOLVE(Irecv, MPI_Irecv);
#undef DK_RESOLVE
  // Every entry point is there: an OpenMPI, not some other file an override
  // named. Its components may now find it.
  DK_RETURN_IF_ERROR(PromoteToGlobal(lib));
#define DK_HANDLE(field, symbol) \
  DK_RETURN_IF_ERROR(ResolveHandle(#symbol, &m.field))
  DK_HANDLE(comm_world, ompi_mpi_comm_world);
  DK_HANDLE(comm_null, ompi_mpi_comm_null);
  DK_HANDLE(group_null, ompi_mpi_group_null);
  DK_HANDLE(errors_return, ompi_mpi_errors_return);
  DK_HANDLE(datatype_null, ompi_mpi_datatype_null);
  DK_HANDLE(byte, ompi_mpi_byte);
  DK_HANDLE(float32, ompi_mpi_float);
  DK_HANDLE(float64, ompi_mpi_double);
  DK_HANDLE(int8, ompi_mpi_int8_t);
  DK_HANDLE(uint8, ompi_mpi_uint8_t);
  DK_HANDLE(uint16, ompi_mpi_uint16_t);
  DK_HANDLE(int32, ompi_mpi_int32_t);
  DK_HANDLE(int64, ompi_mpi_int64_t);
  DK_HANDLE(op_null, ompi_mpi_op_null);
  DK_HANDLE(sum, ompi_mpi_op_sum);
  DK_HANDLE(prod, ompi_mpi_op_prod);
  DK_HANDLE(min, ompi_mpi_op_min);
  DK_HANDLE(max, ompi_mpi_op_max);
  DK_HANDLE(band, ompi_mpi_op_band);
  DK_HANDLE(bor, ompi_mpi_op_bor);
  DK_HANDLE(bxor, ompi_mpi_op_bxor);
#undef DK_HANDLE
  return m;
}

}  // namespace

absl::StatusOr<const MpiLibrary*> LoadMpiLibrary() {
  return LoadOnce<MpiLibrary, Load>();
}

const MpiLibrary& Mpi() {
  absl::StatusOr<const MpiLibrary*> library = LoadMpiLibrary();
  assert(library.ok() && "an MPI call before EnsureMpi loaded OpenMPI");
  return **library;
}

}  // namespace distkit
