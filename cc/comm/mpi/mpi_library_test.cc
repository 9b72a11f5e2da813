// OpenMPI's entry points and predefined handles as distkit resolves them at
// run time (mpi_library.h) are the ones this program binds at link time: it
// links libmpi itself, so distkit finds that copy, and it is a PIE that names
// the handles, so they are copies in the executable (copy relocations) that
// libmpi uses in place of its own: taken from libmpi's handle they differ.
#include "cc/comm/mpi/mpi_library.h"

#include <mpi.h>

#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(MpiLibraryTest, HandlesAreTheOnesMpiHNames) {
  absl::StatusOr<const MpiLibrary*> loaded = LoadMpiLibrary();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const MpiLibrary& m = **loaded;
  EXPECT_EQ(&Mpi(), &m);
  EXPECT_EQ(m.comm_world, MPI_COMM_WORLD);
  EXPECT_EQ(m.comm_null, MPI_COMM_NULL);
  EXPECT_EQ(m.group_null, MPI_GROUP_NULL);
  EXPECT_EQ(m.errors_return, MPI_ERRORS_RETURN);
  EXPECT_EQ(m.datatype_null, MPI_DATATYPE_NULL);
  EXPECT_EQ(m.byte, MPI_BYTE);
  EXPECT_EQ(m.float32, MPI_FLOAT);
  EXPECT_EQ(m.float64, MPI_DOUBLE);
  EXPECT_EQ(m.int8, MPI_INT8_T);
  EXPECT_EQ(m.uint8, MPI_UINT8_T);
  EXPECT_EQ(m.uint16, MPI_UINT16_T);
  EXPECT_EQ(m.int32, MPI_INT32_T);
  EXPECT_EQ(m.int64, MPI_INT64_T);
  EXPECT_EQ(m.op_null, MPI_OP_NULL);
  EXPECT_EQ(m.sum, MPI_SUM);
  EXPECT_EQ(m.prod, MPI_PROD);
  EXPECT_EQ(m.min, MPI_MIN);
  EXPECT_EQ(m.max, MPI_MAX);
  EXPECT_EQ(m.band, MPI_BAND);
  EXPECT_EQ(m.bor, MPI_BOR);
  EXPECT_EQ(m.bxor, MPI_BXOR);
  EXPECT_EQ(m.Initialized, &MPI_Initialized);
  EXPECT_EQ(m.InitThread, &MPI_Init_thread);
  EXPECT_EQ(m.QueryThread, &MPI_Query_thread);
  EXPECT_EQ(m.Finalized, &MPI_Finalized);
  EXPECT_EQ(m.Finalize, &MPI_Finalize);
  EXPECT_EQ(m.ErrorString, &MPI_Error_string);
  EXPECT_EQ(m.CommRank, &MPI_Comm_rank);
  EXPECT_EQ(m.CommSize, &MPI_Comm_size);
  EXPECT_EQ(m.CommSetErrhandler, &MPI_Comm_set_errhandler);
  EXPECT_EQ(m.CommSplit, &MPI_Comm_split);
  EXPECT_EQ(m.CommGroup, &MPI_Comm_group);
  EXPECT_EQ(m.CommCreateGroup, &MPI_Comm_create_group);
  EXPECT_EQ(m.CommFree, &MPI_Comm_free);
  EXPECT_EQ(m.GroupIncl, &MPI_Group_incl);
  EXPECT_EQ(m.GroupFree, &MPI_Group_free);
  EXPECT_EQ(m.TypeContiguous, &MPI_Type_contiguous);
  EXPECT_EQ(m.TypeCommit, &MPI_Type_commit);
  EXPECT_EQ(m.OpCreate, &MPI_Op_create);
  EXPECT_EQ(m.Test, &MPI_Test);
  EXPECT_EQ(m.Cancel, &MPI_Cancel);
  EXPECT_EQ(m.Iallreduce, &MPI_Iallreduce);
  EXPECT_EQ(m.Ibcast, &MPI_Ibcast);
  EXPECT_EQ(m.Ireduce, &MPI_Ireduce);
  EXPECT_EQ(m.Iallgather, &MPI_Iallgather);
  EXPECT_EQ(m.Igather, &MPI_Igather);
  EXPECT_EQ(m.Iscatter, &MPI_Iscatter);
  EXPECT_EQ(m.IreduceScatterBlock, &MPI_Ireduce_scatter_block);
  EXPECT_EQ(m.Ialltoall, &MPI_Ialltoall);
  EXPECT_EQ(m.Ialltoallv, &MPI_Ialltoallv);
  EXPECT_EQ(m.Isend, &MPI_Isend);
  EXPECT_EQ(m.Irecv, &MPI_Irecv);
  // Without mpirun nothing has initialized MPI.
  int initialized = 1;
  EXPECT_EQ(m.Initialized(&initialized), MPI_SUCCESS);
  EXPECT_EQ(initialized, 0);
}

}  // namespace
}  // namespace distkit
