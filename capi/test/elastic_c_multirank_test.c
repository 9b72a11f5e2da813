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
#include "testing/c/rank_check.h"

#define DIM 4

static void initial_state(double* w, double* m) {
  for (int j = 0; j < DIM; ++j) {
    w[j] = 0.5 - 0.25 * j;
    m[j] = 0;
  }
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  dk_test_elastic_run_t run;
  dk_group_t* group = dk_test_elastic_join(argc, argv, &run);
  dk_error_t* err = NULL;

  double w[DIM], m[DIM];
  int64_t step = 0;
  initial_state(w, m);
  if (run.newcomer) {
    /* Whatever a fresh process holds: only the sync may give it its state. */
    for (int j = 0; j < DIM; ++j) w[j] = m[j] = NAN;
    step = -1;
  }
  dk_snapshot_t* snapshot = NULL;
  if (dk_snapshot_create(&snapshot, &err) != DK_OK) dk_test_die("create", err);
  if (dk_snapshot_register(snapshot, "w", w, sizeof(w), &err) != DK_OK ||
      dk_snapshot_register(snapshot, "momentum", m, sizeof(m), &err) != DK_OK ||
      dk_snapshot_register(snapshot, "step", &step, sizeof(step), &err) !=
          DK_OK) {
    dk_test_die("register", err);
  }
  int recoveries = 0, steps_run = 0;
  if (run.newcomer) {
    /* dk_init joined the survivors' grow: its world is the grown group, on
     * which the survivors sync next. */
    int64_t commit = 0;
    if (dk_snapshot_sync(snapshot, group, &commit, &err) != DK_OK)
      dk_test_die("the replacement's sync", err);
    dk_test_elastic_check_commit(&run, group, "loaded", commit, step, 0);
  } else if (dk_snapshot_commit(snapshot, &err) != DK_OK) {
    dk_test_die("the first commit", err);
  }
  while (step < DK_TEST_STEPS) {
    const int n = dk_group_size(group), r = dk_group_rank(group);
    double g[DIM];
    dk_test_gradient(step, r * DK_TEST_GLOBAL_BATCH / n,
                     (r + 1) * DK_TEST_GLOBAL_BATCH / n, w, g, DIM);
    for (int j = 0; j < DIM; ++j) m[j] *= DK_TEST_BETA;
    if (!run.newcomer && recoveries == 0 && dk_test_rank == DK_TEST_VICTIM &&
        step == run.die_at) {
      printf("rank %d: SIGKILL in step %lld\n", dk_test_rank, (long long)step);
      raise(SIGKILL);
    }
    int64_t len = DIM;
    DLTensor t = dk_test_host_tensor(g, &len, 1, kDLFloat, 64);
    dk_status_t s = dk_group_all_reduce(group, &t, DK_OP_SUM, NULL, &err);
    if (s != DK_OK) {
      int grown = 0;
      dk_group_t* next =
          dk_test_elastic_recover(&run, group, step, s, &err, &grown);
      dk_group_destroy(group);
      group = next;
      ++recoveries;
      int64_t commit = 0;
      if (dk_snapshot_sync(snapshot, group, &commit, &err) != DK_OK)
        dk_test_die("the survivors' sync", err);
      dk_test_elastic_check_commit(&run, group, "loaded", commit, step, grown);
      continue;
    }
    for (int j = 0; j < DIM; ++j) {
      m[j] += g[j] / DK_TEST_GLOBAL_BATCH;
      w[j] -= DK_TEST_LR * m[j];
    }
    ++step;
    ++steps_run;
    if (step % DK_TEST_COMMIT_EVERY == 0 &&
        dk_snapshot_commit(snapshot, &err) != DK_OK) {
      dk_test_die("commit", err);
    }
  }
  dk_test_check(dk_snapshot_commit_number(snapshot) ==
                    1 + DK_TEST_STEPS / DK_TEST_COMMIT_EVERY,
                "every commit counted");
  dk_test_check(
      dk_snapshot_bytes(snapshot) == (int64_t)(sizeof(w) + sizeof(m) + 8),
      "a full copy held");
  double want[DIM];
  double m0[DIM];
  initial_state(want, m0);
  dk_test_reference(want, DIM);
  const double bad =
      dk_test_elastic_verdict(&run, group, recoveries, steps_run, w, want, DIM);
  dk_snapshot_destroy(snapshot);
  dk_group_destroy(group);
  dk_shutdown();
  return dk_test_elastic_exit(&run, bad, steps_run);
}
