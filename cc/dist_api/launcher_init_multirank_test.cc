// init_dist through the slurm and mpi launchers in a real job. distrun starts
// the ranks; each rank then rewrites its environment into what srun or mpirun
// would have set (no WORLD_SIZE, no DISTKIT_STORE; Slurm's hostlist, no
// MASTER_ADDR; OpenMPI's OMPI_COMM_WORLD_*) before calling InitDist, so rank 0
// hosts the store itself, as it would under those launchers.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/launch/launcher.h"

int main(int argc, char** argv) {
  using namespace distkit;
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string rank = getenv("RANK"), world = getenv("WORLD_SIZE");
  const std::string local = getenv("LOCAL_RANK");
  // A port every rank derives alike from distrun's (unique while this job
  // runs), below Linux's ephemeral range (32768 and up): the ports the
  // kernel hands to connecting sockets and to Gloo's listeners, which took
  // distrun's port + 1 often enough to fail this test.
  const std::string port =
      absl::StrCat(20000 + atoi(getenv("MASTER_PORT")) % 12000);
  for (const char* var :
       {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
        "DISTKIT_STORE", "DISTKIT_TOKEN", "MASTER_ADDR", "MASTER_PORT"}) {
    unsetenv(var);
  }
  if (mode == "slurm") {
    setenv("SLURM_PROCID", rank.c_str(), 1);
    setenv("SLURM_NTASKS", world.c_str(), 1);
    setenv("SLURM_LOCALID", local.c_str(), 1);
    setenv("SLURM_NODELIST", "localhost", 1);  // the hostlist; no MASTER_ADDR
    setenv("MASTER_PORT", port.c_str(), 1);
  } else if (mode == "mpi") {
    setenv("OMPI_COMM_WORLD_RANK", rank.c_str(), 1);
    setenv("OMPI_COMM_WORLD_SIZE", world.c_str(), 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", local.c_str(), 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", world.c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port.c_str(), 1);
  } else {
    fprintf(stderr, "mode must be slurm or mpi\n");
    return 2;
  }
  Environment env = Environment::FromProcess();
  if (LauncherName(InferLauncher(env)) != mode) {
    fprintf(stderr, "infer_launcher gave %s\n",
            std::string(LauncherName(InferLauncher(env))).c_str());
    return 1;
  }
  dist::InitOptions options;
  options.timeout = absl::Seconds(30);
  absl::Status s = dist::InitDist(mode, options);
  if (!s.ok()) {
    fprintf(stderr, "init_dist('%s'): %s\n", mode.c_str(),
            s.ToString().c_str());
    return 1;
  }
  int64_t value = dist::GetRank() + 1;
  s = dist::AllReduce(TensorRef(&value, 1, DataType::kInt64), "sum");
  const int n = dist::GetWorldSize();
  const bool ok = s.ok() && value == n * (n + 1) / 2 &&
                  dist::GetRank() == atoi(rank.c_str()) &&
                  n == atoi(world.c_str());
  printf("%s: rank %d of %d, sum %lld: %s\n", mode.c_str(), dist::GetRank(), n,
         static_cast<long long>(value), ok ? "ok" : s.ToString().c_str());
  (void)dist::Barrier();
  dist::DestroyDist();
  return ok ? 0 : 1;
}
