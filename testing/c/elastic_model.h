/* What the C elastic-loop tests share (capi/test/elastic_c_multirank_test.c,
 * whose state is a dk_snapshot_t, and sharded_elastic_c_multirank_test.c,
 * whose state is a dk_shard_t's shard in a dk_sharded_snapshot_t): the
 * launcher's numbers, the model's loss, and the recovery after a lost peer
 * as distkit.elastic decides it. */
#ifndef DISTKIT_TESTING_C_ELASTIC_MODEL_H_
#define DISTKIT_TESTING_C_ELASTIC_MODEL_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"

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

/* The uninterrupted run in one process: `steps` steps of SGD with momentum
 * on the mean gradient of each step's global batch of `batch` samples, from
 * the `dim` weights in w (replaced by the final ones). */
static inline void dk_test_reference(double* w, int dim, int64_t steps,
                                     int batch, double lr, double beta) {
  double* m = (double*)calloc((size_t)dim, sizeof(double));
  double* g = (double*)malloc((size_t)dim * sizeof(double));
  for (int64_t t = 0; t < steps; ++t) {
    dk_test_gradient(t, 0, batch, w, g, dim);
    for (int j = 0; j < dim; ++j) {
      m[j] = beta * m[j] + g[j] / batch;
      w[j] -= lr * m[j];
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

#endif /* DISTKIT_TESTING_C_ELASTIC_MODEL_H_ */
