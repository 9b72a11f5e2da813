// Where OpenMPI cannot be loaded, libdistkit still loads (it never links
// libmpi) and asking for an MPI group is a clear error naming what was
// tried, not a crash or a hang.
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
