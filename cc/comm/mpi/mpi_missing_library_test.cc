// Where the OpenMPI distkit is told to use cannot be loaded, asking for an
// MPI group is a clear error naming what was tried, not a crash or a hang.
// (That libdistkit.so loads without OpenMPI at all is
// capi/abi_symbols_test.sh's: it has no NEEDED libmpi and no MPI symbol
// left to resolve.)
#include <cstdlib>

#include "absl/time/time.h"
#include "cc/comm/mpi/mpi_backend.h"
#include "cc/comm/mpi/mpi_runtime.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(MpiMissingLibraryTest, AnMpiGroupIsAClearError) {
  ::setenv("DISTKIT_MPI_LIBRARY", "/nonexistent/libmpi.so.40", 1);
  absl::Status init = EnsureMpi(absl::Seconds(10));
  EXPECT_EQ(init.code(), absl::StatusCode::kFailedPrecondition) << init;
  EXPECT_NE(init.message().find("DISTKIT_MPI_LIBRARY"), absl::string_view::npos)
      << init;
  EXPECT_NE(init.message().find("/nonexistent/libmpi.so.40"),
            absl::string_view::npos)
      << init;
  auto world = MpiBackend::CreateWorld(0, 1, absl::Seconds(10));
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status(), init);
}

}  // namespace
}  // namespace distkit
