// OpenMPI's entry points and predefined handles as distkit resolves them at
// run time (mpi_library.h) are the ones mpi.h's macros name at link time:
// this test links libmpi itself, so the loader finds that copy and every
// handle must be the same address.
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
  EXPECT_EQ(m.Iallreduce, &MPI_Iallreduce);
  EXPECT_EQ(m.Test, &MPI_Test);
  EXPECT_EQ(m.CommCreateGroup, &MPI_Comm_create_group);
  // Without mpirun nothing has initialized MPI.
  int initialized = 1;
  EXPECT_EQ(m.Initialized(&initialized), MPI_SUCCESS);
  EXPECT_EQ(initialized, 0);
}

}  // namespace
}  // namespace distkit
