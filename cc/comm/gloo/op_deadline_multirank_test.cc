// One deadline per operation on the Gloo backend (flat TCP, run by
// dk_multirank_test): every wait of an operation, and every phase of it (the
// backend calls it is made of, with one OpContext), gets only what is left of
// the operation's timeout (2 s here), not the whole timeout again. Modes:
//   barrier  rank 0 enters the signature exchange (a barrier) at once, rank 1
//            1.6 s later and the others 3.6 s later -> rank 0 ends with
//            DEADLINE_EXCEEDED at about 2 s. Before, each of its waits got
//            the whole timeout: the wait for the last records began when
//            rank 1's came, and rank 0 returned at 3.6 s, often OK.
//   phases   an all_reduce too large to ride in the exchange: rank 0 calls
//            both phases at once, the others the exchange 1.6 s later and the
//            data 2 s after that -> rank 0's data phase ends with
//            DEADLINE_EXCEEDED at about 2 s. Before, the data phase started
//            a timeout of its own at 1.6 s and returned at 3.6 s.
// Times are from rank 0's start and Scaled (time_scale.h).
// Every rank ends in bounded time. Late ranks have no bound on how they end
// (their peer gave up), only on when.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cc/comm/gloo/gloo_backend.h"
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
  Require(mode == "barrier" || mode == "phases", "mode is barrier or phases");
  const int rank = atoi(getenv("RANK"));
  const int size = atoi(getenv("WORLD_SIZE"));
  testing::SetCheckRank(rank);
  Require(size >= (mode == "barrier" ? 3 : 2), "enough ranks");

  // The job's store; the world group itself is not used. Joining has a
  // long bound: how fast busy cores start the job is not what this checks.
  absl::StatusOr<testing::RankEnv> env =
      testing::JoinJob(absl::Seconds(60), "gloo", absl::Seconds(60));
  RequireOk(env.status(), "join the job");
  auto store = std::make_shared<PrefixStore>(absl::StrCat("op_deadline/", mode),
                                             env->store);

  GlooBackend::Options options;
  options.hostname = "127.0.0.1";
  options.timeout = absl::Seconds(60);  // connecting; each op has its own
  absl::StatusOr<std::unique_ptr<GlooBackend>> made =
      GlooBackend::Create(store, rank, size, options);
  RequireOk(made.status(), "the gloo backend");
  GlooBackend& backend = **made;

  // Every rank connected; then rank 0 starts and writes when into "go". The
  // others start late counted from that time, not from their own read of
  // "go" (ranks of one host share CLOCK_REALTIME): rank 0 descheduled after
  // its Set would have lost the lateness. The whole timeline is Scaled, so a
  // sanitizer build still tells one deadline from two.
  testing::MarkAndAwaitAll(*store, "ready", rank, size, absl::Seconds(60));
  absl::Time start;
  if (rank == 0) {
    start = absl::Now();
    RequireOk(store->Set("go", absl::StrCat(absl::ToUnixNanos(start))), "go");
  } else {
    absl::StatusOr<std::string> go = store->Get("go", absl::Seconds(60));
    RequireOk(go.status(), "wait for go");
    int64_t ns = 0;
    Require(absl::SimpleAtoi(*go, &ns), "go holds rank 0's start");
    start = absl::FromUnixNanos(ns);
  }
  // Rank 1 comes before rank 0's deadline; a second timeout counted from
  // its arrival would end at 3.6 s, past the 3.5 s rank 0 is allowed.
  const absl::Duration timeout = testing::Scaled(absl::Seconds(2));
  const absl::Duration late =
      rank == 0 ? absl::ZeroDuration()
                : testing::Scaled(rank == 1 || mode == "phases"
                                      ? absl::Milliseconds(1600)
                                      : absl::Milliseconds(3600));
  absl::SleepFor(start + late - absl::Now());

  OpContext ctx;
  ctx.seq = 1;
  ctx.group_name = "deadline";
  ctx.timeout = timeout;
  std::vector<OpSignature> all(size);
  absl::Status status;
  if (mode == "barrier") {
    ctx.op = OpCode::kBarrier;
    OpSignature mine;
    mine.op = static_cast<uint32_t>(OpCode::kBarrier);
    mine.seq = 1;
    status = backend.ExchangeSignatures(ctx, mine, InlinePayload{},
                                        absl::MakeSpan(all));
  } else {
    ctx.op = OpCode::kAllReduce;
    // Past the inline limit: the data goes through Gloo's algorithm.
    std::vector<float> data((backend.inline_limit() * 2) / sizeof(float), 1.0f);
    TensorRef t(data.data(), static_cast<int64_t>(data.size()),
                DataType::kFloat32);
    OpSignature mine = MakeSignature(ctx, OpCode::kAllReduce, &t, t.numel(), -1,
                                     static_cast<int>(ReduceOp::kSum));
    InlinePayload payload;
    payload.data = data.data();
    payload.bytes = t.nbytes();
    status =
        backend.ExchangeSignatures(ctx, mine, payload, absl::MakeSpan(all));
    printf("rank %d: exchange %s after %s\n", rank,
           std::string(absl::StatusCodeToString(status.code())).c_str(),
           absl::FormatDuration(absl::Now() - start).c_str());
    if (status.ok()) {
      // The data at rank 0's start + late + timeout: after rank 0's
      // deadline, when a timeout of the data phase's own would end.
      if (rank != 0) absl::SleepFor(start + late + timeout - absl::Now());
      status = backend.AllReduce(ctx, t, ReduceOp::kSum);
    }
  }
  const absl::Duration took = absl::Now() - start;
  printf("rank %d: %s after %s: %s\n", rank,
         std::string(absl::StatusCodeToString(status.code())).c_str(),
         absl::FormatDuration(took).c_str(), status.ToString().c_str());

  if (rank == 0) {
    Check(absl::IsDeadlineExceeded(status),
          absl::StrCat("rank 0 times out, not ", status.ToString()));
    Check(took >= timeout - absl::Milliseconds(100),
          absl::StrCat("rank 0 waits its timeout (", absl::FormatDuration(took),
                       ")"));
    // At the deadline, not a second timeout counted from a later phase or
    // wait (3.6 s).
    Check(took < timeout + Scaled(absl::Milliseconds(1500)),
          absl::StrCat("rank 0 ends at its deadline, ",
                       absl::FormatDuration(timeout), ", not after ",
                       absl::FormatDuration(took)));
  } else {
    Check(status.ok() || absl::IsDeadlineExceeded(status) ||
              absl::IsUnavailable(status),
          absl::StrCat("a late rank ends by its peers or its deadline, not ",
                       status.ToString()));
    Check(took < late + timeout + Scaled(absl::Seconds(3)),
          absl::StrCat("rank ", rank, " ends in bounded time, not after ",
                       absl::FormatDuration(took)));
  }

  // Nobody tears down its connections while a peer is still in the test.
  testing::MarkAndAwaitAll(*store, "done", rank, size, absl::Seconds(60));
  return testing::FinishChecks(absl::StrCat("op deadline ", mode));
}
