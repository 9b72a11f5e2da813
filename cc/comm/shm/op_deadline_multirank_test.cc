// One deadline per operation on the same-host path (and the host stages of
// the hierarchical one), run by dk_multirank_test: rank 1 progresses through
// a many-step operation slowly but never stops (DISTKIT_SHM_TEST_STEP_PAUSE_MS
// = 500: it pauses before each step it publishes), so each step's wait is
// far below the 2 s timeout while the operation as a whole takes 8-10 s.
// Every other rank must end with DEADLINE_EXCEEDED at about its timeout.
// Before, each step counted the timeout afresh: the operation succeeded
// after 8-10 s (shm), or host 0's leader returned only when its host's
// stage was done (hierarchical). Modes (argv[1]), on the slots
// (DISTKIT_SHM_SINGLE_COPY=0):
//   all_reduce  8 MiB: the signature exchange, then 8 chunks of 2 steps each
//               (by slices); under DISTKIT_TEST_HOSTS=2 the hierarchical
//               all_reduce of 16 MiB, not cut into chunks for the link, whose
//               host stages (reduce, broadcast) take 32 and 20 steps
//               ("all_reduce link": rank 1 pauses 250 ms, and the operation
//               is cut into chunks:
//               //cc/comm/hierarchical:op_deadline_link_test with a slow link
//               too; before, the link's own Gloo deadline kept host 0's leader
//               about one timeout longer)
//   broadcast   16 MiB from rank 0: chunks of 64 KiB doubling to 1 MiB, 20
//               steps
// The backend is made from the registry ("gloo"), not through a group, so
// that the group's diagnosis of late ranks does not add to what is timed.
// Rank 1 ends in bounded time too (its own deadline, from its first wait
// after the others left), in whatever way.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/op_signature.h"
#include "cc/store/prefix_store.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"
#include "testing/cc/store_marks.h"
#include "testing/cc/time_scale.h"

using distkit::testing::Check;
using distkit::testing::Require;
using distkit::testing::RequireOk;
using distkit::testing::Scaled;

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  Require(mode == "all_reduce" || mode == "broadcast",
          "mode is all_reduce or broadcast");
  const int rank = atoi(getenv("RANK"));
  const int size = atoi(getenv("WORLD_SIZE"));
  testing::SetCheckRank(rank);
  Require(size >= 2, "at least two ranks");
  const bool hosts = getenv("DISTKIT_TEST_HOSTS") != nullptr;

  // The world group (made without the pause) only joins the job and
  // declares the test's hosts; the backend under test is made below.
  absl::StatusOr<testing::RankEnv> env =
      testing::JoinJob(absl::Seconds(60), "gloo", absl::Seconds(60));
  RequireOk(env.status(), "join the job");
  auto store = std::make_shared<PrefixStore>(absl::StrCat("op_deadline/", mode),
                                             env->store);

  // The slots at every size; read when the backend is made, as the pause.
  setenv("DISTKIT_SHM_SINGLE_COPY", "0", 1);
  // The link's case pauses shorter: host 0's first chunk must be through
  // its host stage, and the link started, well before the deadline.
  const bool link = argc > 2 && std::string(argv[2]) == "link";
  const absl::Duration pause = absl::Milliseconds(link ? 250 : 500);
  if (rank == 1) {
    setenv("DISTKIT_SHM_TEST_STEP_PAUSE_MS",
           absl::StrCat(absl::ToInt64Milliseconds(pause)).c_str(), 1);
  }
  const BackendFactory* factory = FindBackend("gloo");
  Require(factory != nullptr, "the gloo backend is registered");
  BackendConfig config;
  config.store = store;
  config.rank = rank;
  config.size = size;
  config.local_rank = env->info.local_rank;
  config.timeout = absl::Seconds(60);  // creation; the op has its own
  absl::StatusOr<std::unique_ptr<Backend>> made = (*factory)(config);
  RequireOk(made.status(), "the backend");
  Backend& backend = **made;

  // Every rank made its backend; then all start together.
  testing::MarkAndAwaitAll(*store, "ready", rank, size, absl::Seconds(60));

  const absl::Duration timeout = absl::Seconds(2);
  OpContext ctx;
  ctx.seq = 1;
  ctx.group_name = "op_deadline";
  ctx.timeout = timeout;
  ctx.op = mode == "all_reduce" ? OpCode::kAllReduce : OpCode::kBroadcast;
  const size_t bytes = mode == "broadcast" || hosts ? 16 << 20 : 8 << 20;
  std::vector<float> data(bytes / sizeof(float), 1.0f);
  TensorRef t(data.data(), static_cast<int64_t>(data.size()),
              DataType::kFloat32);
  const int root = ctx.op == OpCode::kBroadcast ? 0 : -1;
  OpSignature mine =
      MakeSignature(ctx, ctx.op, &t, t.numel(), root,
                    root < 0 ? static_cast<int>(ReduceOp::kSum) : 0);
  InlinePayload payload;
  payload.data = data.data();
  payload.bytes = t.nbytes();
  payload.output = data.data();
  std::vector<OpSignature> all(size);

  const absl::Time start = absl::Now();
  absl::Status status =
      backend.ExchangeSignatures(ctx, mine, payload, absl::MakeSpan(all));
  if (status.ok()) {
    status = ctx.op == OpCode::kAllReduce
                 ? backend.AllReduce(ctx, t, ReduceOp::kSum)
                 : backend.Broadcast(ctx, t, root);
  }
  const absl::Duration took = absl::Now() - start;
  printf("rank %d: %s after %s: %s\n", rank,
         std::string(absl::StatusCodeToString(status.code())).c_str(),
         absl::FormatDuration(took).c_str(), status.ToString().c_str());

  if (rank != 1) {
    Check(absl::IsDeadlineExceeded(status),
          absl::StrCat("rank ", rank, " times out, not ", status.ToString()));
    Check(absl::StrContains(status.message(),
                            "timed out after 2s waiting for peers"),
          "the timeout's message is unchanged: " + status.ToString());
    Check(took >= timeout - absl::Milliseconds(100),
          absl::StrCat("rank ", rank, " waits its timeout (",
                       absl::FormatDuration(took), ")"));
    // At about one timeout, not after every step's wait got its own (the
    // whole operation at rank 1's pace: 8-10 s and more).
    Check(took < timeout + Scaled(absl::Milliseconds(1500)),
          absl::StrCat("rank ", rank, " ends at its deadline, 2 s, not after ",
                       absl::FormatDuration(took)));
  } else {
    // Its own deadline starts at its first wait that reads the clock: the
    // first step after the others left (at 2 s), a pause or two later.
    Check(!status.ok(), "rank 1's operation fails too: its peers left it");
    Check(took < 2 * timeout + 2 * pause + Scaled(absl::Seconds(2)),
          absl::StrCat("rank 1 ends in bounded time, not after ",
                       absl::FormatDuration(took)));
  }

  // Nobody exits while a peer is still in the test (an exited peer would
  // end its waits with UNAVAILABLE).
  testing::MarkAndAwaitAll(*store, "done", rank, size, absl::Seconds(60));
  return testing::FinishChecks(absl::StrCat("op deadline ", mode));
}
