// Joins a job through a real launcher (torchrun, mpirun, or Slurm's
// variables) with init_dist(<launcher>, <backend>), checks that the rank and
// size agree with what the launcher set, and runs collectives whose results
// every rank computes itself.
//   launcher_multirank_test pytorch|mpi|slurm [gloo|mpi]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"
#include "testing/cc/rank_check.h"

namespace {

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  distkit::testing::Require(v != nullptr, absl::StrCat(name, " is not set"));
  return std::atoi(v);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace distkit;
  distkit::testing::Require(
      argc >= 2, "usage: launcher_multirank_test LAUNCHER [BACKEND]");
  const std::string launcher = argv[1];
  dist::InitOptions options;
  options.backend = argc > 2 ? argv[2] : "gloo";
  options.timeout = absl::Seconds(60);
  absl::Status s = dist::InitDist(launcher, options);
  distkit::testing::Require(s.ok(), "init_dist: " + s.ToString());
  const int rank = dist::GetRank(), size = dist::GetWorldSize();
  if (launcher == "pytorch") {
    distkit::testing::Require(
        rank == EnvInt("RANK") && size == EnvInt("WORLD_SIZE"),
        "torchrun's RANK/WORLD_SIZE");
  } else if (launcher == "mpi") {
    distkit::testing::Require(rank == EnvInt("OMPI_COMM_WORLD_RANK") &&
                                  size == EnvInt("OMPI_COMM_WORLD_SIZE"),
                              "OpenMPI's rank/size");
  } else if (launcher == "slurm") {
    distkit::testing::Require(
        rank == EnvInt("SLURM_PROCID") && size == EnvInt("SLURM_NTASKS"),
        "Slurm's rank/size");
  }
  auto world = dist::GetDefaultGroup();
  distkit::testing::Require(world->backend_name() == options.backend,
                            "backend");
  std::vector<int64_t> v = {rank, 1};
  s = world->AllReduce(TensorRef(v.data(), 2, DataType::kInt64),
                       ReduceOp::kSum);
  distkit::testing::Require(
      s.ok() && v[0] == int64_t{size} * (size - 1) / 2 && v[1] == size,
      "all_reduce: " + s.ToString());
  std::vector<int32_t> mine = {rank}, all(size);
  s = world->AllGather(TensorRef(mine.data(), 1, DataType::kInt32),
                       TensorRef(all.data(), size, DataType::kInt32));
  distkit::testing::Require(s.ok(), "all_gather: " + s.ToString());
  for (int r = 0; r < size; ++r)
    distkit::testing::Require(all[r] == r, "all_gather order");
  distkit::testing::Require(dist::Barrier().ok(), "barrier");
  std::printf("rank %d/%d: joined through %s with backend %s\n", rank, size,
              launcher.c_str(), options.backend.c_str());
  dist::DestroyDist();
  return 0;
}
