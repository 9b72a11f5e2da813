// Rank 0's environment picks the "gloo" group's path for every rank:
// DISTKIT_SHM=0 (Gloo's TCP for everything) and DISTKIT_HIERARCHICAL=0 (a
// multi-host group flat over TCP), set on rank 0 alone or on every rank but
// rank 0. Before, each rank read its own variable, so ranks that disagreed
// went into different exchanges and waited for each other until init's
// timeout. Modes:
//   shm_off_at_rank0            DISTKIT_SHM=0 on rank 0 only: TCP everywhere
//   shm_off_elsewhere           on every other rank: shared memory everywhere
//   hierarchical_off_at_rank0   ranks 0-1 declare one host, the rest another
//                               (DISTKIT_HOST_ID); DISTKIT_HIERARCHICAL=0 on
//                               rank 0 only: flat TCP everywhere
//   hierarchical_off_elsewhere  on every other rank: hierarchical everywhere
// Each rank joins the job (init must not time out), checks an all_reduce of
// rank-dependent values, then makes a second "gloo" backend from the
// registry and checks which path it is.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/gloo/gloo_backend.h"
#include "cc/comm/hierarchical/hierarchical_backend.h"
#include "cc/comm/shm/shm_backend.h"
#include "cc/store/prefix_store.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"

using distkit::testing::Check;
using distkit::testing::Require;
using distkit::testing::RequireOk;

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool shm = mode == "shm_off_at_rank0" || mode == "shm_off_elsewhere";
  const bool at_rank0 =
      mode == "shm_off_at_rank0" || mode == "hierarchical_off_at_rank0";
  Require(shm || mode == "hierarchical_off_at_rank0" ||
              mode == "hierarchical_off_elsewhere",
          "mode is shm_off_at_rank0, shm_off_elsewhere, "
          "hierarchical_off_at_rank0 or hierarchical_off_elsewhere");
  const int rank = atoi(getenv("RANK"));
  const int size = atoi(getenv("WORLD_SIZE"));
  testing::SetCheckRank(rank);
  Require(size >= (shm ? 2 : 3), "enough ranks");

  const char* variable = shm ? "DISTKIT_SHM" : "DISTKIT_HIERARCHICAL";
  if (at_rank0 == (rank == 0)) {
    setenv(variable, "0", 1);
  } else {
    unsetenv(variable);
  }
  if (!shm) setenv("DISTKIT_HOST_ID", rank < 2 ? "host_a" : "host_b", 1);

  // Joining has 20 s: ranks that went different ways waited that long.
  const absl::Time start = absl::Now();
  absl::StatusOr<testing::RankEnv> env =
      testing::JoinJob(absl::Seconds(30), "gloo", absl::Seconds(20));
  RequireOk(env.status(), "join the job");
  printf("rank %d: joined in %s\n", rank,
         absl::FormatDuration(absl::Now() - start).c_str());

  std::vector<float> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = rank * 1000.0f + i;
  RequireOk(env->world->AllReduce(
                TensorRef(data.data(), data.size(), DataType::kFloat32),
                ReduceOp::kSum),
            "all_reduce");
  size_t wrong = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const float want = 1000.0f * size * (size - 1) / 2 + size * float(i);
    wrong += data[i] != want;
  }
  Check(wrong == 0, absl::StrCat(wrong, " of 1000 sums wrong"));

  const BackendFactory* gloo = FindBackend("gloo");
  Require(gloo != nullptr, "gloo is registered");
  BackendConfig config;
  config.store = std::make_shared<PrefixStore>("path_check", env->store);
  config.rank = rank;
  config.size = size;
  config.timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<Backend>> backend = (*gloo)(config);
  RequireOk(backend.status(), "a second gloo backend");
  Backend* b = backend->get();
  const bool tcp = dynamic_cast<GlooBackend*>(b) != nullptr;
  const bool shared = dynamic_cast<ShmBackend*>(b) != nullptr;
  const bool hierarchical = dynamic_cast<HierarchicalBackend*>(b) != nullptr;
  const char* path = tcp ? "tcp" : shared ? "shm" : hierarchical ? "hier" : "?";
  const char* want = at_rank0 ? "tcp" : shm ? "shm" : "hier";
  printf("rank %d: path %s\n", rank, path);
  Check(std::string(path) == want,
        absl::StrCat("rank 0's choice picks the path: ", want, ", not ", path));
  // Gloo's TCP mesh is made asynchronously: a rank whose side is connected
  // may return while a peer still reads its handshake. Keep the second
  // backend until every rank has it, so one rank's exit does not close a
  // connection another is still making.
  RequireOk(env->world->Barrier(), "barrier after the second backend");
  return testing::FinishChecks(absl::StrCat("path choice ", mode));
}
