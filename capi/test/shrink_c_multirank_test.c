/* Recovery without restarting, through the C ABI in a real job: a linear
 * model trained with mean-reduced gradients; before step 5 the last rank
 * dies (exits without a word). The survivors' step 5 fails; each calls
 * dk_group_shrink on the default group, which becomes a group of the
 * survivors; they redo step 5 and finish training at world size - 1. The
 * weights must equal training computed here without communication: steps
 * 0-4 averaged over every rank's data, steps 5-9 over the survivors'. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

#define DIM 4
#define STEPS 10
#define DIES_BEFORE 5
#define LR 0.1

/* Rank r's sample: x = (r+1, 1, -r, 0.5), y = 2r - 1. */
static void grad_of(int r, const double* w, double* g) {
  const double x[DIM] = {r + 1.0, 1.0, -(double)r, 0.5};
  double pred = 0;
  for (int i = 0; i < DIM; ++i) pred += w[i] * x[i];
  const double e = pred - (2.0 * r - 1.0);
  for (int i = 0; i < DIM; ++i) g[i] = e * x[i];
}

static void reference(int size, double* w) {
  memset(w, 0, sizeof(double) * DIM);
  for (int step = 0; step < STEPS; ++step) {
    const int n = step < DIES_BEFORE ? size : size - 1;
    double mean[DIM] = {0};
    for (int r = 0; r < n; ++r) {
      double g[DIM];
      grad_of(r, w, g);
      for (int i = 0; i < DIM; ++i) mean[i] += g[i] / n;
    }
    for (int i = 0; i < DIM; ++i) w[i] -= LR * mean[i];
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  dk_group_t* world = dk_test_init(NULL, 20000);
  dk_error_t* err = NULL;
  const int size = dk_group_size(world);
  if (size < 2) {
    printf("rank 0: one rank, nothing to shrink\n");
    return 0;
  }
  double w[DIM] = {0};
  int shrunk = 0;
  for (int step = 0; step < STEPS; ++step) {
    if (step == DIES_BEFORE && dk_test_rank == size - 1) {
      printf("rank %d dies before step %d\n", dk_test_rank, step);
      _exit(0); /* no clean-up: a rank that vanishes */
    }
    double g[DIM];
    grad_of(dk_test_rank, w, g);
    int64_t n = DIM;
    DLTensor t = dk_test_host_tensor(g, &n, 1, kDLFloat, 64);
    err = NULL;
    dk_status_t s = dk_group_all_reduce(NULL, &t, DK_OP_MEAN, NULL, &err);
    if (s != DK_OK) {
      dk_test_check(step == DIES_BEFORE && !shrunk,
                    "only the step the rank died in fails");
      dk_test_check(s == DK_UNAVAILABLE || s == DK_DEADLINE_EXCEEDED,
                    "the failure is a lost peer or a timeout");
      printf("rank %d: step %d failed (%s); shrinking\n", dk_test_rank, step,
             dk_error_message(err));
      dk_error_free(err);
      dk_group_t* survivors = NULL;
      err = NULL;
      if (dk_group_shrink(NULL, 2000, &survivors, &err) != DK_OK)
        dk_test_die("dk_group_shrink", err);
      shrunk = 1;
      dk_test_check(dk_group_size(survivors) == size - 1,
                    "the survivors' group");
      dk_test_check(dk_group_rank(survivors) == dk_test_rank,
                    "ranks keep their order");
      dk_test_check(dk_group_size(NULL) == size - 1,
                    "it is the default group now");
      dk_group_destroy(survivors);
      --step; /* redo the step at the smaller size */
      continue;
    }
    for (int i = 0; i < DIM; ++i) w[i] -= LR * g[i];
  }
  dk_test_check(shrunk, "the job shrank");
  double ref[DIM];
  reference(size, ref);
  for (int i = 0; i < DIM; ++i) {
    dk_test_check(fabs(w[i] - ref[i]) <= 1e-9 * (1 + fabs(ref[i])),
                  "weights equal training without communication");
  }
  err = NULL;
  if (dk_group_barrier(NULL, NULL, &err) != DK_OK) dk_test_die("barrier", err);
  dk_group_destroy(world);
  dk_shutdown();
  if (dk_test_failures == 0)
    printf("rank %d: trained on after the shrink, w[0]=%.6f\n", dk_test_rank,
           w[0]);
  return dk_test_failures == 0 ? 0 : 1;
}
