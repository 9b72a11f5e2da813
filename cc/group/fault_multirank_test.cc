// Failure behaviour of a real job (run by dk_multirank_test at world sizes
// 2-4). The last rank misbehaves; every other rank checks that it gets a clear
// error in bounded time and that the group is then poisoned.
//   timeout    the last rank never joins an all_reduce -> DEADLINE_EXCEEDED
//              naming op, group, sequence number and the missing rank
//   timeout_recorded  as timeout, but the last rank first records a job
//              failure, as distrun does for a killed rank -> the others'
//              DEADLINE_EXCEEDED also names the recorded death (a peer that
//              died can look late: Gloo's send to a killed rank may wait for
//              its receive until the timeout)
//   dead_peer  the last rank exits -> UNAVAILABLE, long before the timeout
//   abort      Abort() from another thread ends a stuck operation at once
//   finished_peer  the last rank joins the all_reduce late and exits right
//              after it -> every other rank succeeds with the right sum (a
//              rank that did its part and left is not a failure; BUILD sets
//              DISTKIT_SHM_TEST_LIVENESS_PAUSE_MS to open the race window)
//   zombie     the last rank exits without joining, and its parent (the
//              process distrun started) does not reap it until the others
//              are done -> they get UNAVAILABLE within 5 s (a zombie is not
//              alive)
//   threads    a second thread issues a collective while the first thread's
//              is in flight (the last rank joins it only after the others'
//              marks) -> FAILED_PRECONDITION (never silently paired
//              with another call), while a thread that issues as the
//              first thread's issuer (IssuerScope) is not and pairs with
//              the peers' next call; the first completes with the right
//              sum, and a thread that takes over an idle group may issue
//   abort_link  (hosts) rank 0 aborts a pipelined all_reduce across hosts
//              mid-way, then the others abort -> every rank's work ends
//              within 5 s (CANCELLED on rank 0), not at the op timeout: a
//              leader's link stage waits inside a Gloo call or for its own
//              link's chunk, which Abort() must end too
//   abort_link_last  as abort_link, the last rank aborting first
//   abort_roll_call  every rank but the last aborts an all_reduce, then the
//              last joins it alone and times out -> its diagnosis does not
//              say that the aborted ranks never joined
//   abort_p2p  Abort() ends a pending receive (the peer never sends) ->
//              CANCELLED at once
//   destroy_busy  the group is destroyed with an all_reduce in flight that
//              nobody waits for -> destroy returns within 2 s, not after the
//              op's timeout
//   frozen_store  the last rank never joins and freezes the store's host
//              (distrun, with SIGSTOP) -> the others still fail within
//              timeout + diagnosis budget, saying the late ranks are unknown
//              (the last rank thaws distrun once they are done)
//
// The misbehaving rank stays away exactly until the others have their
// result: they leave a mark (SurvivorMarks) and it waits for every mark, never
// a fixed sleep that is too short on a loaded machine and wasted on an idle
// one. Time bounds are Scaled() for sanitizer builds.

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/group/issuer.h"
#include "cc/store/job_failure.h"
#include "testing/cc/file_contents.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"
#include "testing/cc/time_scale.h"

using distkit::testing::Check;
using distkit::testing::Scaled;

namespace {

// Marks the surviving ranks leave once they have their result, as files in a
// directory of this job's own (the store cannot carry them: one mode freezes
// its host, and the zombie's parent never joins). The misbehaving rank waits
// for all of them before it returns, exits or thaws the store.
class SurvivorMarks {
 public:
  SurvivorMarks() {
    const char* tmp = getenv("TEST_TMPDIR");
    const char* job = getenv("DISTKIT_TOKEN");
    if (job == nullptr) job = getenv("MASTER_PORT");
    dir_ =
        absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/fault_multirank_test.",
                     std::string(job != nullptr ? job : "job").substr(0, 16));
    mkdir(dir_.c_str(), 0700);
  }

  void MarkDone(int rank) const {
    std::ofstream(absl::StrCat(dir_, "/done.", rank)) << "done\n";
  }

  // Whether ranks 0 .. survivors-1 all marked within `limit` (a bound for a
  // survivor that crashed before marking; the test fails through it anyway).
  bool AwaitAll(int survivors, absl::Duration limit) const {
    const absl::Time give_up = absl::Now() + limit;
    while (true) {
      int marked = 0;
      for (int r = 0; r < survivors; ++r) {
        marked += access(absl::StrCat(dir_, "/done.", r).c_str(), F_OK) == 0;
      }
      if (marked == survivors) return true;
      if (absl::Now() >= give_up) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

 private:
  std::string dir_;
};

// How long the misbehaving rank waits at most for the survivors' marks.
constexpr absl::Duration kHoldLimit = absl::Seconds(40);

}  // namespace

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool short_timeout = mode == "timeout" || mode == "timeout_recorded" ||
                             mode == "frozen_store" || mode == "p2p_timeout" ||
                             mode == "abort_roll_call";
  // The timeout itself is what three modes test: short, so the test is
  // too. Joining has a bound of its own (connect_timeout): how fast 2 busy
  // cores start the job is not what they check.
  const absl::Duration timeout =
      short_timeout ? Scaled(absl::Seconds(2)) : absl::Seconds(30);
  const SurvivorMarks marks;
  if (mode == "zombie" && getenv("RANK") != nullptr &&
      atoi(getenv("RANK")) == atoi(getenv("WORLD_SIZE")) - 1 &&
      atoi(getenv("WORLD_SIZE")) > 1) {
    // The rank runs in a child; this process outlives it without reaping
    // until every survivor is done.
    const pid_t rank_process = fork();
    if (rank_process > 0) {
      marks.AwaitAll(atoi(getenv("WORLD_SIZE")) - 1, kHoldLimit);
      waitpid(rank_process, nullptr, 0);
      _exit(0);
    }
  }
  absl::StatusOr<testing::RankEnv> env =
      testing::JoinJob(timeout, "gloo", absl::Seconds(60));
  if (!env.ok()) {
    fprintf(stderr, "%s\n", env.status().ToString().c_str());
    return 1;
  }
  ProcessGroup& world = *env->world;
  const int rank = world.rank(), last = world.size() - 1;
  testing::SetCheckRank(rank);
  if (world.size() < 2) return 0;
  // Everyone is connected before anyone misbehaves.
  if (!world.Barrier().ok()) return 1;
  const bool abort_link = mode == "abort_link" || mode == "abort_link_last";
  std::vector<float> data(
      abort_link
          ? 8 << 20
          : (mode == "dead_peer" || mode == "abort_roll_call" ? 1 << 20 : 4),
      1.0f);
  TensorRef t(data.data(), data.size(), DataType::kFloat32);

  if (mode == "p2p_timeout") {
    // Rank 0 waits for a send rank 1 never makes; the other ranks are idle.
    // The timeout names rank 1 alone, without the group's roll call (whose
    // window would add 2 s and name the idle ranks too).
    if (rank != 0) {
      marks.AwaitAll(1, kHoldLimit);
      _exit(testing::FinishChecks("fault 'p2p_timeout' handled as expected"));
    }
    const absl::Time start = absl::Now();
    absl::Status st = world.Recv(t, 1, /*tag=*/7);
    const absl::Duration took = absl::Now() - start;
    marks.MarkDone(rank);
    Check(st.code() == absl::StatusCode::kDeadlineExceeded,
          "the receive times out: " + st.ToString());
    Check(absl::StrContains(st.message(),
                            "rank 1 did not make the matching send"),
          "the timeout names the peer: " + st.ToString());
    Check(!absl::StrContains(st.message(), "never joined"),
          "no roll call of the other ranks: " + st.ToString());
    Check(took < timeout + Scaled(absl::Milliseconds(1800)),
          "the op timeout and no more: " + absl::FormatDuration(took));
    _exit(testing::FinishChecks("fault 'p2p_timeout' handled as expected"));
  }
  if (mode == "abort_p2p" || mode == "destroy_busy") {
    if (rank == last) {
      marks.AwaitAll(last, kHoldLimit);
      _exit(0);
    }
    absl::Time start;
    if (mode == "abort_p2p") {
      std::shared_ptr<Work> w = world.RecvAsync(t, last, /*tag=*/7);
      absl::SleepFor(absl::Milliseconds(300));
      Check(!w->Test(), "the receive is pending before the abort");
      start = absl::Now();
      world.Abort();
      absl::Status st = w->Wait(absl::Seconds(10));
      Check(st.code() == absl::StatusCode::kCancelled,
            "an aborted receive is CANCELLED: " + st.ToString());
    } else {
      (void)world.AllReduceAsync(t, ReduceOp::kSum);  // nobody waits for it
      absl::SleepFor(absl::Milliseconds(300));
      start = absl::Now();
      env->world.reset();  // the last reference: the group is destroyed
    }
    const absl::Duration took = absl::Now() - start;
    marks.MarkDone(rank);
    printf("rank %d: %s ended after %s\n", rank, mode.c_str(),
           absl::FormatDuration(took).c_str());
    Check(took < Scaled(absl::Seconds(2)), "bounded, not the 30 s op timeout");
    _exit(testing::FinishChecks("fault '" + mode + "' handled as expected"));
  }
  if (mode == "abort_roll_call") {
    // Every rank but the last reaches all_reduce #2 and aborts it; the last
    // then reaches it alone and times out (4 MiB: too large to complete from
    // the records the others sent before their abort). Its diagnosis must not
    // say the others never joined: they did, and ended it with CANCELLED.
    if (rank != last) {
      std::shared_ptr<Work> w = world.AllReduceAsync(t, ReduceOp::kSum);
      absl::SleepFor(absl::Milliseconds(300));
      world.Abort();
      absl::Status st = w->Wait(absl::Seconds(10));
      Check(st.code() == absl::StatusCode::kCancelled,
            "aborted work is CANCELLED: " + st.ToString());
      marks.MarkDone(rank);
      // Connections stay until the last rank has its diagnosis.
      Check(env->store->Wait({"abort_roll_call/last"}, kHoldLimit).ok(),
            "the last rank finishes");
      _exit(
          testing::FinishChecks("fault 'abort_roll_call' handled as expected"));
    }
    Check(marks.AwaitAll(last, kHoldLimit), "the others aborted");
    absl::Status st = world.AllReduce(t, ReduceOp::kSum);
    printf("rank %d got: %s\n", rank, st.ToString().c_str());
    Check(st.code() == absl::StatusCode::kDeadlineExceeded,
          "the last rank times out: " + st.ToString());
    Check(!absl::StrContains(st.message(), "never joined"),
          "ranks that aborted the operation joined it: " + st.ToString());
    (void)env->store->Set("abort_roll_call/last", "1");
    _exit(testing::FinishChecks("fault 'abort_roll_call' handled as expected"));
  }
  if (abort_link) {
    // One rank aborts the pipelined all_reduce mid-way; once its wait has
    // ended, the others abort too. However a rank's link stage stood (a
    // Gloo call waiting for a chunk the aborted leader will never send, or
    // Done() for a chunk of its own link), its operation ends long before
    // the 30 s op timeout.
    const int first = mode == "abort_link" ? 0 : last;
    std::shared_ptr<Work> w = world.AllReduceAsync(t, ReduceOp::kSum);
    absl::Status st;
    absl::Duration took;
    if (rank == first) {
      absl::SleepFor(absl::Milliseconds(300));
      Check(!w->Test(), "the all_reduce is in flight before the abort");
      const absl::Time start = absl::Now();
      world.Abort();
      st = w->Wait(absl::Seconds(40));
      took = absl::Now() - start;
      Check(st.code() == absl::StatusCode::kCancelled,
            "the aborting rank's work is CANCELLED: " + st.ToString());
      (void)env->store->Set("abort_link/first", "1");
    } else {
      Check(env->store->Wait({"abort_link/first"}, absl::Seconds(45)).ok(),
            "the first rank's abort ends its wait");
      // Its op may have failed already (UNAVAILABLE): the aborted rank's
      // interrupted Gloo operation closed its connections, or its host's
      // stage failed with it; no abort of this rank's.
      const absl::Time start = absl::Now();
      world.Abort();
      st = w->Wait(absl::Seconds(40));
      took = absl::Now() - start;
      Check(
          st.code() == absl::StatusCode::kCancelled ||
              st.code() == absl::StatusCode::kUnavailable,
          "CANCELLED, or UNAVAILABLE from the aborted rank: " + st.ToString());
    }
    printf("rank %d: %s ended %s after its abort: %s\n", rank, mode.c_str(),
           absl::FormatDuration(took).c_str(), st.ToString().c_str());
    Check(took < Scaled(absl::Seconds(5)), "bounded, not the 30 s op timeout");
    // Nobody exits (closing its connections) before every rank is done.
    (void)env->store->Set(absl::StrCat("abort_link/done/", rank), "1");
    std::vector<std::string> done;
    for (int r = 0; r <= last; ++r) {
      done.push_back(absl::StrCat("abort_link/done/", r));
    }
    Check(env->store->Wait(done, absl::Seconds(45)).ok(), "every rank done");
    _exit(testing::FinishChecks("fault '" + mode + "' handled as expected"));
  }
  if (mode == "threads") {
    // The last rank joins A only once every other rank's second thread was
    // refused (their marks): A is in flight on them until then, however
    // late they run.
    if (rank == last) {
      Check(marks.AwaitAll(last, kHoldLimit), "the others checked the refusal");
    }
    std::shared_ptr<Work> a = world.AllReduceAsync(t, ReduceOp::kSum);
    if (rank != last) {
      absl::Status b;
      std::vector<float> other(4, 5.0f);
      std::thread([&] {
        b = world.AllReduce(
            TensorRef(other.data(), other.size(), DataType::kFloat32),
            ReduceOp::kSum);
      }).join();
      marks.MarkDone(rank);
      Check(b.code() == absl::StatusCode::kFailedPrecondition &&
                absl::StrContains(b.message(), "another thread"),
            "a second thread is refused while the first's op is in flight: " +
                b.ToString());
      Check(other[0] == 5.0f, "the refused call's data is untouched");
    }
    // A thread that issues as the first thread's issuer (issuer.h: how
    // autograd's device thread and a goroutine that changed threads carry
    // one sequence) is the same issuer: its call, made while A is still in
    // flight, is the next one, paired with the last rank's second call.
    std::vector<int64_t> next(3, rank + 1);
    TensorRef next_ref(next.data(), next.size(), DataType::kInt64);
    absl::Status scoped;
    if (rank != last) {
      const uint32_t issuer = CurrentIssuer();
      std::thread([&] {
        IssuerScope as(issuer);
        scoped = world.AllReduce(next_ref, ReduceOp::kSum);
      }).join();
    } else {
      scoped = world.AllReduce(next_ref, ReduceOp::kSum);
    }
    const int64_t ranks_sum = int64_t{world.size()} * (world.size() + 1) / 2;
    Check(scoped.ok() && next[0] == ranks_sum && next[2] == ranks_sum,
          "a thread issuing as the first thread's issuer is not refused and "
          "its all_reduce pairs with the peers' next call: " +
              scoped.ToString());
    Check(a->Wait().ok(), "the first thread's all_reduce completes");
    Check(data[0] == world.size(), "with the right sum");
    absl::Status handed;
    std::thread([&] { handed = world.AllReduce(t, ReduceOp::kSum); }).join();
    Check(handed.ok() && data[0] == world.size() * world.size(),
          "another thread may issue once the group is idle: " +
              handed.ToString());
    _exit(testing::FinishChecks("fault 'threads' handled as expected"));
  }
  if (mode == "finished_peer") {
    if (rank == last) absl::SleepFor(absl::Milliseconds(300));
    absl::Status st = world.AllReduce(t, ReduceOp::kSum);
    if (rank == last) _exit(st.ok() ? 0 : 1);  // leaves at once, no clean-up
    Check(st.ok(),
          "a peer that left after its part is no failure: " + st.ToString());
    Check(data[0] == world.size(), "the sum is complete");
    _exit(testing::FinishChecks("fault 'finished_peer' handled as expected"));
  }
  if (rank == last && mode == "frozen_store") {
    printf("rank %d freezes the store host (pid %d)\n", rank,
           static_cast<int>(getppid()));
    const pid_t launcher = getppid();
    kill(launcher, SIGSTOP);
    // Thawed only after every survivor has failed; a survivor that thawed
    // it could let a slower one's diagnosis succeed.
    marks.AwaitAll(last, kHoldLimit);
    kill(launcher, SIGCONT);
    _exit(0);
  }
  if (rank == last) {
    // Alive but absent until the others have timed out or aborted: it must
    // not be seen gone first.
    if (mode == "timeout_recorded") {
      Check(ReportJobFailure(
                *env->store,
                absl::StrCat("rank ", rank, " was killed by signal 9 (test)"))
                .ok(),
            "the failure is recorded");
    }
    if (mode == "timeout" || mode == "timeout_recorded" || mode == "abort") {
      marks.AwaitAll(last, kHoldLimit);
    }
    printf("rank %d leaves without joining\n", rank);
    _exit(0);  // no clean-up: a peer that vanishes
  }
  if (mode == "dead_peer") absl::SleepFor(absl::Milliseconds(300));

  const absl::Time start = absl::Now();
  absl::Status st;
  if (mode == "abort") {
    std::shared_ptr<Work> w = world.AllReduceAsync(t, ReduceOp::kSum);
    absl::SleepFor(absl::Milliseconds(500));
    Check(!w->Test(), "the operation is stuck before the abort");
    world.Abort();
    st = w->Wait(absl::Seconds(10));
    Check(st.code() == absl::StatusCode::kCancelled,
          "aborted work is CANCELLED: " + st.ToString());
    // No rank exits before every one has aborted: a rank whose abort comes
    // a few ms later (4 ranks on 2 cores) would otherwise see its peer gone
    // first and fail with UNAVAILABLE, which is right for it, not an abort.
    (void)env->store->Set(absl::StrCat("abort_done/", rank), "1");
    std::vector<std::string> aborted;
    for (int r = 0; r < last; ++r) {
      aborted.push_back(absl::StrCat("abort_done/", r));
    }
    Check(env->store->Wait(aborted, absl::Seconds(10)).ok(),
          "every rank's abort ends its wait");
    marks.MarkDone(rank);
  } else {
    st = world.AllReduce(t, ReduceOp::kSum);
  }
  const absl::Duration took = absl::Now() - start;
  if (mode != "abort") marks.MarkDone(rank);
  printf("rank %d got after %s: %s\n", rank, absl::FormatDuration(took).c_str(),
         st.ToString().c_str());
  const std::string msg(st.message());
  if (mode == "frozen_store") {
    Check(st.code() == absl::StatusCode::kDeadlineExceeded,
          "DEADLINE_EXCEEDED");
    Check(absl::StrContains(msg, "which ranks are late is unknown"),
          "an unanswered store gives 'unknown', not a guess");
    Check(took < timeout + Scaled(absl::Seconds(5)),
          "bounded by timeout + diagnosis budget");
  } else if (mode == "zombie") {
    Check(st.code() == absl::StatusCode::kUnavailable, "UNAVAILABLE");
    Check(took < Scaled(absl::Seconds(5)), "a zombie is seen as gone at once");
  } else if (mode == "timeout") {
    Check(st.code() == absl::StatusCode::kDeadlineExceeded,
          "DEADLINE_EXCEEDED");
    Check(absl::StrContains(msg, "all_reduce #2 on group 'world'"),
          "names op, seq, group");
    Check(
        absl::StrContains(msg, absl::StrCat("rank(s) ", last, " never joined")),
        "names the late rank");
    Check(took >= timeout * 0.9 && took < timeout + Scaled(absl::Seconds(6)),
          "bounded by timeout");
    // The flight recorder wrote what this rank was doing (distrun sets
    // DISTKIT_TRACE_DIR and summarizes the files of a failed job).
    if (const char* dir = getenv("DISTKIT_TRACE_DIR")) {
      const std::string text = testing::FileContents(
          absl::StrCat(dir, "/world.rank", rank, ".trace"));
      Check(absl::StrContains(text,
                              "seq=2 kind=collective op=all_reduce "
                              "state=failed") &&
                absl::StrContains(text,
                                  "call=\"all_reduce #2 float32 x4 op=sum\""),
            "the flight record holds the timed-out all_reduce: " + text);
    }
  } else if (mode == "timeout_recorded") {
    Check(st.code() == absl::StatusCode::kDeadlineExceeded,
          "DEADLINE_EXCEEDED");
    Check(absl::StrContains(msg, "all_reduce #2 on group 'world'"),
          "names op, seq, group");
    Check(absl::StrContains(msg, absl::StrCat("the job failed: rank ", last,
                                              " was killed by signal 9")),
          "names the recorded death");
    Check(took >= timeout * 0.9 && took < timeout + Scaled(absl::Seconds(6)),
          "bounded by timeout");
  } else if (mode == "dead_peer") {
    Check(st.code() == absl::StatusCode::kUnavailable, "UNAVAILABLE");
    Check(absl::StrContains(msg, "all_reduce #2 on group 'world'"),
          "names op, seq, group");
    Check(took < absl::Seconds(20), "well before the 30 s timeout");
  } else if (mode == "abort") {
    Check(took < Scaled(absl::Seconds(5)), "abort ends the wait at once");
  } else {
    fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  // The group is poisoned now; later calls fail at once, naming the cause.
  absl::Status again = world.AllReduce(t, ReduceOp::kSum);
  Check(again.code() == absl::StatusCode::kFailedPrecondition,
        "later calls fail: " + again.ToString());
  Check(!world.AsyncError().ok(), "AsyncError reports the failure");
  // A survivor keeps its process, and with it its connections, until every
  // survivor has its error: across hosts the others must learn of the death
  // from the failure itself (the host leader closes its links), not from a
  // survivor's exit, as they must when survivors stay to shrink.
  if (mode == "dead_peer") marks.AwaitAll(last, kHoldLimit);
  _exit(testing::FinishChecks("fault '" + mode + "' handled as expected"));
}
