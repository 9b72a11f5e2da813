/* The elastic loop through the C ABI: training that survives a lost rank
 * with no restart and no checkpoint file. A small model (w and its momentum
 * m, float64) takes 16 steps; each step's gradient is the sum over a global
 * batch of 12 samples, shared among the ranks of the current group (rank r
 * of n takes samples [r*12/n, (r+1)*12/n)), all_reduced (SUM) and divided by
 * 12, so every world size trains on the same batches. The state (w, m, the
 * step) is registered in a dk_snapshot_t and committed before the first
 * step and after every 4th. Before the all_reduce of step DIE_AT (7 + the
 * world size: 1 to 3 steps after the last commit) rank 1 SIGKILLs itself,
 * after scaling its momentum (the first half of the momentum update, as
 * every rank does before the all_reduce): the survivors' step fails with
 * their own momentum half-updated. They recover the way distkit.elastic
 * does: under DISTKIT_MAX_REPLACEMENTS (distrun --max-replacements 1) they
 * grow back (dk_group_grow) while distrun's new process for rank 1 joins
 * through dk_init; else, where DISTKIT_MIN_RANKS allows it (distrun
 * --min-ranks 1), they shrink (dk_group_shrink). Every member of the new
 * group, the replacement included (its state starts as NaN), then calls
 * dk_snapshot_sync, which loads the newest commit, and all redo the steps
 * since it. The final weights are compared with an uninterrupted run of the
 * same schedule computed here in one process without communication
 * (relative 1e-12: only the order of the partial sums differs). The argument
 * ("grow" or "shrink") says which recovery the launcher's variables must
 * lead to. A failed check on any rank fails every rank (the counts are
 * all_reduced before exiting), so --min-ranks cannot let a job with a wrong
 * rank pass. */
#define _POSIX_C_SOURCE 200809L /* SIGKILL */

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distkit/distkit.h"
#include "testing/c/elastic_model.h"
#include "testing/c/host_tensor.h"

#define DIM 4
#define GLOBAL_BATCH 12
#define STEPS 16
#define COMMIT_EVERY 4
#define LR 0.1
#define BETA 0.9
#define VICTIM 1
#define TIMEOUT_MS 20000
#define SETTLE_MS 2000

static int world_rank_ = -1, failures_;

static void check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "rank %d: CHECK FAILED: %s\n", world_rank_, what);
    ++failures_;
  }
}

static void die(const char* what, dk_error_t* err) {
  fprintf(stderr, "rank %d: %s: %s\n", world_rank_, what,
          err != NULL ? dk_error_message(err) : "");
  exit(1);
}

static void initial_state(double* w, double* m) {
  for (int j = 0; j < DIM; ++j) {
    w[j] = 0.5 - 0.25 * j;
    m[j] = 0;
  }
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int want_grow = argc > 1 && strcmp(argv[1], "grow") == 0;
  const int newcomer = dk_test_env_number("DISTKIT_REPLACEMENT") > 0;
  dk_init_config_t cfg;
  dk_init_config_init(&cfg);
  cfg.timeout_ms = TIMEOUT_MS;
  dk_group_t* group = NULL;
  dk_error_t* err = NULL;
  if (dk_init_version(DK_ABI_MAJOR, DK_ABI_MINOR, &err) != DK_OK)
    die("dk_init_version", err);
  if (dk_init("pytorch", &cfg, &group, &err) != DK_OK) die("dk_init", err);
  world_rank_ = dk_group_rank(group);
  const int size = dk_group_size(group);
  if (size < 2) {
    printf("rank %d: needs 2 ranks or more\n", world_rank_);
    return 1;
  }
  check(want_grow == (dk_test_env_number("DISTKIT_MAX_REPLACEMENTS") > 0),
        "the launcher replaces lost ranks in the grow variant only");
  check(want_grow || dk_test_env_number("DISTKIT_MIN_RANKS") > 0,
        "the shrink variant runs under distrun --min-ranks");
  const int64_t die_at = 7 + size;
  const int64_t want_commit = 1 + die_at / COMMIT_EVERY;

  double w[DIM], m[DIM];
  int64_t step = 0;
  initial_state(w, m);
  if (newcomer) {
    /* Whatever a fresh process holds: only the sync may give it its state. */
    for (int j = 0; j < DIM; ++j) w[j] = m[j] = NAN;
    step = -1;
  }
  dk_snapshot_t* snapshot = NULL;
  if (dk_snapshot_create(&snapshot, &err) != DK_OK) die("create", err);
  if (dk_snapshot_register(snapshot, "w", w, sizeof(w), &err) != DK_OK ||
      dk_snapshot_register(snapshot, "momentum", m, sizeof(m), &err) != DK_OK ||
      dk_snapshot_register(snapshot, "step", &step, sizeof(step), &err) !=
          DK_OK) {
    die("register", err);
  }
  int recoveries = 0, steps_run = 0;
  if (newcomer) {
    /* dk_init joined the survivors' grow: its world is the grown group, on
     * which the survivors sync next. */
    int64_t commit = 0;
    if (dk_snapshot_sync(snapshot, group, &commit, &err) != DK_OK)
      die("the replacement's sync", err);
    printf("rank %d: replacement joined '%s', loaded commit %lld (step %lld)\n",
           world_rank_, dk_group_name(group), (long long)commit,
           (long long)step);
    check(commit == want_commit, "the replacement loads the newest commit");
    check(step == (die_at / COMMIT_EVERY) * COMMIT_EVERY,
          "the replacement's step is the commit's");
  } else if (dk_snapshot_commit(snapshot, &err) != DK_OK) {
    die("the first commit", err);
  }
  while (step < STEPS) {
    const int n = dk_group_size(group), r = dk_group_rank(group);
    double g[DIM];
    dk_test_gradient(step, r * GLOBAL_BATCH / n, (r + 1) * GLOBAL_BATCH / n, w,
                     g, DIM);
    for (int j = 0; j < DIM; ++j) m[j] *= BETA;
    if (!newcomer && recoveries == 0 && world_rank_ == VICTIM &&
        step == die_at) {
      printf("rank %d: SIGKILL in step %lld\n", world_rank_, (long long)step);
      raise(SIGKILL);
    }
    int64_t len = DIM;
    DLTensor t = dk_test_host_tensor(g, &len, 1, kDLFloat, 64);
    dk_status_t s = dk_group_all_reduce(group, &t, DK_OP_SUM, NULL, &err);
    if (s != DK_OK) {
      printf("rank %d: step %lld failed (%s); recovering\n", world_rank_,
             (long long)step, dk_error_message(err));
      check(step == die_at, "the step the victim died in fails");
      check(s == DK_UNAVAILABLE || s == DK_DEADLINE_EXCEEDED,
            "a lost peer or a timeout");
      dk_error_free(err);
      err = NULL;
      int grown = 0;
      const char* what = "";
      dk_group_t* next =
          dk_test_recover(group, TIMEOUT_MS, SETTLE_MS, &grown, &err, &what);
      if (next == NULL) die(what, err);
      dk_group_destroy(group);
      group = next;
      ++recoveries;
      check(grown == want_grow, "grown under --max-replacements, else shrunk");
      check(dk_group_size(group) == (grown ? size : size - 1),
            "the new group's size");
      int64_t commit = 0;
      if (dk_snapshot_sync(snapshot, group, &commit, &err) != DK_OK)
        die("the survivors' sync", err);
      printf("rank %d: %s to %d ranks, loaded commit %lld (step %lld)\n",
             world_rank_, grown ? "grew" : "shrank", dk_group_size(group),
             (long long)commit, (long long)step);
      check(commit == want_commit, "the survivors load the newest commit");
      check(step == (die_at / COMMIT_EVERY) * COMMIT_EVERY,
            "the step is the commit's: the steps since are redone");
      continue;
    }
    for (int j = 0; j < DIM; ++j) {
      m[j] += g[j] / GLOBAL_BATCH;
      w[j] -= LR * m[j];
    }
    ++step;
    ++steps_run;
    if (step % COMMIT_EVERY == 0 &&
        dk_snapshot_commit(snapshot, &err) != DK_OK) {
      die("commit", err);
    }
  }
  check(dk_snapshot_commit_number(snapshot) == 1 + STEPS / COMMIT_EVERY,
        "every commit counted");
  check(dk_snapshot_bytes(snapshot) == (int64_t)(sizeof(w) + sizeof(m) + 8),
        "a full copy held");
  if (newcomer) {
    check(steps_run == STEPS - (die_at / COMMIT_EVERY) * COMMIT_EVERY,
          "the replacement trains from the commit");
  } else {
    check(recoveries == 1, "one recovery");
    check(steps_run == STEPS + die_at % COMMIT_EVERY,
          "the steps since the commit are trained twice");
  }
  double want[DIM];
  double m0[DIM];
  initial_state(want, m0);
  dk_test_reference(want, DIM, STEPS, GLOBAL_BATCH, LR, BETA);
  check(dk_test_final_mismatches(world_rank_, w, want, DIM) == 0,
        "final weights equal the uninterrupted run's");
  const double bad = dk_test_job_failures(group, failures_, &err);
  if (bad < 0) die("the final all_reduce", err);
  dk_snapshot_destroy(snapshot);
  dk_group_destroy(group);
  dk_shutdown();
  if (bad > 0) {
    fprintf(stderr, "rank %d: %g check(s) failed in the job\n", world_rank_,
            bad);
    return 1;
  }
  printf("rank %d: %s; w equals the uninterrupted run's after %d steps\n",
         world_rank_,
         newcomer ? "joined as a replacement"
                  : (want_grow ? "grew back" : "shrank"),
         steps_run);
  return 0;
}
