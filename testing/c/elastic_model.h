/* What the C elastic-loop tests share (capi/test/elastic_c_multirank_test.c,
 * whose state is a dk_snapshot_t, and sharded_elastic_c_multirank_test.c,
 * whose state is a dk_shard_t's shard in a dk_sharded_snapshot_t): the
 * schedule, the launcher's numbers, the model's loss, the recovery after a
 * lost peer as distkit.elastic decides it, and the run's checks from the
 * join to the job's verdict. */
#ifndef DISTKIT_TESTING_C_ELASTIC_MODEL_H_
#define DISTKIT_TESTING_C_ELASTIC_MODEL_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

/* The schedule both tests train on: DK_TEST_STEPS steps of SGD with
 * momentum on a global batch of DK_TEST_GLOBAL_BATCH samples, committed
 * every DK_TEST_COMMIT_EVERY steps; rank DK_TEST_VICTIM dies, and the
 * survivors recover within these bounds. */
#define DK_TEST_GLOBAL_BATCH 12
#define DK_TEST_STEPS 16
#define DK_TEST_COMMIT_EVERY 4
#define DK_TEST_LR 0.1
#define DK_TEST_BETA 0.9
#define DK_TEST_VICTIM 1
#define DK_TEST_TIMEOUT_MS 20000
#define DK_TEST_SETTLE_MS 2000

/* A launcher's variable as a number (0 when unset). */
static inline long dk_test_env_number(const char* name) {
  const char* v = getenv(name);
  return v != NULL ? strtol(v, NULL, 10) : 0;
}

/* Sample i of step t's batch (element j), and its weight in the loss. */
static inline double dk_test_sample(int64_t t, int i, int j) {
  return sin(0.37 * (double)t + 1.3 * i + 0.7 * j);
}
static inline double dk_test_weight(int64_t t, int i) {
  return 1.0 + 0.5 * cos((double)t + i);
}

/* The summed gradient of samples [lo, hi) of step t at w (dim elements): a
 * weighted squared error plus a quartic term, so each step's update depends
 * on w nonlinearly. */
static inline void dk_test_gradient(int64_t t, int lo, int hi, const double* w,
                                    double* g, int dim) {
  for (int j = 0; j < dim; ++j) {
    g[j] = 0;
    for (int i = lo; i < hi; ++i) {
      g[j] += dk_test_weight(t, i) * (w[j] - dk_test_sample(t, i, j)) +
              0.01 * w[j] * w[j] * w[j];
    }
  }
}

/* The uninterrupted run in one process: the schedule's steps of SGD with
 * momentum on the mean gradient of each step's global batch, from the `dim`
 * weights in w (replaced by the final ones). */
static inline void dk_test_reference(double* w, int dim) {
  double* m = (double*)calloc((size_t)dim, sizeof(double));
  double* g = (double*)malloc((size_t)dim * sizeof(double));
  for (int64_t t = 0; t < DK_TEST_STEPS; ++t) {
    dk_test_gradient(t, 0, DK_TEST_GLOBAL_BATCH, w, g, dim);
    for (int j = 0; j < dim; ++j) {
      m[j] = DK_TEST_BETA * m[j] + g[j] / DK_TEST_GLOBAL_BATCH;
      w[j] -= DK_TEST_LR * m[j];
    }
  }
  free(m);
  free(g);
}

/* The survivors' new group after `group` failed: grown back where the
 * launcher replaces a lost rank (DISTKIT_MAX_REPLACEMENTS), shrunk where it
 * lets the job go on smaller (DISTKIT_MIN_RANKS) or no replacement came in
 * time. NULL with *err set (and *what naming the call) when neither works. */
static inline dk_group_t* dk_test_recover(dk_group_t* group, int timeout_ms,
                                          int settle_ms, int* grown,
                                          dk_error_t** err, const char** what) {
  const long replacements = dk_test_env_number("DISTKIT_MAX_REPLACEMENTS");
  const long min_ranks = dk_test_env_number("DISTKIT_MIN_RANKS");
  dk_group_t* next = NULL;
  *grown = 0;
  if (replacements > 0) {
    *what = "dk_group_grow";
    const dk_status_t s = dk_group_grow(group, 0, timeout_ms, &next, err);
    if (s == DK_OK) {
      *grown = 1;
      return next;
    }
    if (s != DK_DEADLINE_EXCEEDED || min_ranks <= 0) return NULL;
    dk_error_free(*err);
    *err = NULL;
  }
  *what = "dk_group_shrink";
  if (dk_group_shrink(group, settle_ms, &next, err) != DK_OK) return NULL;
  return next;
}

/* How many of the `dim` final weights w differ from the uninterrupted run's
 * (relative 1e-12: only the order of the partial sums differs), each
 * printed naming `rank`. */
static inline int dk_test_final_mismatches(int rank, const double* w,
                                           const double* want, int dim) {
  int bad = 0;
  for (int j = 0; j < dim; ++j) {
    if (!(fabs(w[j] - want[j]) <= 1e-12 * fabs(want[j]) + 1e-14)) {
      fprintf(stderr, "rank %d: w[%d] = %.17g, the uninterrupted run's %.17g\n",
              rank, j, w[j], want[j]);
      ++bad;
    }
  }
  return bad;
}

/* The job's verdict: every rank's `failures` summed over `group`, so a wrong
 * rank fails every rank (and --min-ranks cannot let the job pass); -1 with
 * *err set when the all_reduce fails. */
static inline double dk_test_job_failures(dk_group_t* group, int failures,
                                          dk_error_t** err) {
  double bad = failures;
  int64_t one = 1;
  DLTensor t = dk_test_host_tensor(&bad, &one, 1, kDLFloat, 64);
  if (dk_group_all_reduce(group, &t, DK_OP_SUM, NULL, err) != DK_OK) return -1;
  return bad;
}

/* What an elastic test's run is: the recovery its argument ("grow" or
 * "shrink") says the launcher's variables must lead to, whether this
 * process is distrun's replacement, and the schedule around the victim's
 * death in step 7 + the world size (1 to 3 steps after a commit). */
typedef struct {
  int want_grow;
  int newcomer;
  int size;            /* the world's, at the start */
  int64_t die_at;      /* the step the victim dies in */
  int64_t commit_step; /* the step of the last commit before it */
  int64_t want_commit; /* that commit's number (the first is 1) */
} dk_test_elastic_run_t;

/* Joins the job as the run `argv` names and returns the world; ends the rank
 * with fewer than 2 ranks, and counts a failed check where the launcher's
 * variables do not fit the run. */
static inline dk_group_t* dk_test_elastic_join(int argc, char** argv,
                                               dk_test_elastic_run_t* run) {
  run->want_grow = argc > 1 && strcmp(argv[1], "grow") == 0;
  run->newcomer = dk_test_env_number("DISTKIT_REPLACEMENT") > 0;
  dk_group_t* world = dk_test_init(NULL, DK_TEST_TIMEOUT_MS);
  run->size = dk_group_size(world);
  dk_test_require(run->size >= 2, "the job has 2 ranks or more");
  dk_test_check(
      run->want_grow == (dk_test_env_number("DISTKIT_MAX_REPLACEMENTS") > 0),
      "the launcher replaces lost ranks in the grow variant only");
  dk_test_check(run->want_grow || dk_test_env_number("DISTKIT_MIN_RANKS") > 0,
                "the shrink variant runs under distrun --min-ranks");
  run->die_at = 7 + run->size;
  run->commit_step =
      (run->die_at / DK_TEST_COMMIT_EVERY) * DK_TEST_COMMIT_EVERY;
  run->want_commit = 1 + run->die_at / DK_TEST_COMMIT_EVERY;
  return world;
}

/* After `group`'s step `step` failed with `status` (*err, which it frees and
 * clears): the survivors' new group, checked against the run (ends the rank
 * when none can be had). *grown says whether it grew back. */
static inline dk_group_t* dk_test_elastic_recover(
    const dk_test_elastic_run_t* run, dk_group_t* group, int64_t step,
    dk_status_t status, dk_error_t** err, int* grown) {
  printf("rank %d: step %lld failed (%s); recovering\n", dk_test_rank,
         (long long)step, dk_error_message(*err));
  dk_test_check(step == run->die_at, "the step the victim died in fails");
  dk_test_check(status == DK_UNAVAILABLE || status == DK_DEADLINE_EXCEEDED,
                "a lost peer or a timeout");
  dk_error_free(*err);
  *err = NULL;
  const char* what = "";
  dk_group_t* next = dk_test_recover(group, DK_TEST_TIMEOUT_MS,
                                     DK_TEST_SETTLE_MS, grown, err, &what);
  if (next == NULL) dk_test_die(what, *err);
  dk_test_check(*grown == run->want_grow,
                "grown under --max-replacements, else shrunk");
  dk_test_check(dk_group_size(next) == (*grown ? run->size : run->size - 1),
                "the new group's size");
  return next;
}

/* What a member of the new `group` got from the snapshot (`how`: "loaded",
 * "fetched"): the newest commit, and the step it holds. The replacement
 * joins `group`; the survivors recovered to it (`grown`: by a grow). */
static inline void dk_test_elastic_check_commit(
    const dk_test_elastic_run_t* run, dk_group_t* group, const char* how,
    int64_t commit, int64_t step, int grown) {
  if (run->newcomer) {
    printf("rank %d: replacement joined '%s', %s commit %lld (step %lld)\n",
           dk_test_rank, dk_group_name(group), how, (long long)commit,
           (long long)step);
    dk_test_check(commit == run->want_commit,
                  "the replacement loads the newest commit");
    dk_test_check(step == run->commit_step,
                  "the replacement's step is the commit's");
    return;
  }
  printf("rank %d: %s to %d ranks, %s commit %lld (step %lld)\n", dk_test_rank,
         grown ? "grew" : "shrank", dk_group_size(group), how,
         (long long)commit, (long long)step);
  dk_test_check(commit == run->want_commit,
                "the survivors load the newest commit");
  dk_test_check(step == run->commit_step,
                "the step is the commit's: the steps since are redone");
}

/* The steps this rank trained (`steps_run`) after `recoveries` recoveries,
 * and its final weights w against the uninterrupted run's; then the job's
 * failed checks, summed over `group` (ends the rank when that fails). */
static inline double dk_test_elastic_verdict(const dk_test_elastic_run_t* run,
                                             dk_group_t* group, int recoveries,
                                             int steps_run, const double* w,
                                             const double* want, int dim) {
  if (run->newcomer) {
    dk_test_check(steps_run == DK_TEST_STEPS - run->commit_step,
                  "the replacement trains from the commit");
  } else {
    dk_test_check(recoveries == 1, "one recovery");
    dk_test_check(
        steps_run == DK_TEST_STEPS + run->die_at % DK_TEST_COMMIT_EVERY,
        "the steps since the commit are trained twice");
  }
  dk_test_check(dk_test_final_mismatches(dk_test_rank, w, want, dim) == 0,
                "final weights equal the uninterrupted run's");
  dk_error_t* err = NULL;
  const double bad = dk_test_job_failures(group, dk_test_failures, &err);
  if (bad < 0) dk_test_die("the final all_reduce", err);
  return bad;
}

/* The exit status for the job's `bad` failed checks, said in a line. */
static inline int dk_test_elastic_exit(const dk_test_elastic_run_t* run,
                                       double bad, int steps_run) {
  if (bad > 0) {
    fprintf(stderr, "rank %d: %g check(s) failed in the job\n", dk_test_rank,
            bad);
    return 1;
  }
  printf("rank %d: %s; w equals the uninterrupted run's after %d steps\n",
         dk_test_rank,
         run->newcomer ? "joined as a replacement"
                       : (run->want_grow ? "grew back" : "shrank"),
         steps_run);
  return 0;
}

#endif /* DISTKIT_TESTING_C_ELASTIC_MODEL_H_ */
