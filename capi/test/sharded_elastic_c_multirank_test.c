/* The elastic loop of a sharded (FSDP) trainer through the C ABI: each
 * rank's shard exists once, and a lost rank's survives only in its
 * neighbour's memory. The model (DIM float64 weights, one flat buffer of a
 * dk_shard_t under FULL_SHARD, padded to the group's size) and its
 * momentum take 16 steps of the loss of elastic_c_multirank_test.c: the
 * gradient is the sum over a global batch of 12 samples shared among the
 * ranks of the current group, divided by 12 (each rank scales its part by
 * n / 12, and dk_shard_reduce_grads averages over the n ranks). The
 * weights' shard (dk_shard_local), the momentum's shard and the step are
 * registered in a dk_sharded_snapshot_t, committed before the first step and
 * after every 4th. Before the reduction of step DIE_AT (7 + the world size)
 * rank 1 SIGKILLs itself. The survivors grow back with distrun's new
 * process for rank 1 (DISTKIT_MAX_REPLACEMENTS) or shrink (DISTKIT_MIN_RANKS),
 * then every member of the new group fetches from the snapshot: the shard
 * it held when the group kept its size (the replacement's from its
 * neighbour), every shard when it shrank. Each loads its part of the new
 * layout into a new dk_shard_t (dk_shard_load_sharded for the weights, the
 * same arithmetic for the momentum), commits a new snapshot on the new group
 * and redoes the steps since the commit. The final weights are compared with
 * an uninterrupted run computed here in one process (relative 1e-12), the
 * snapshot's memory with 2/N of the state, and a failed check on any rank
 * fails every rank. */
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

#define DIM 10

static void initial_weights(double* w) {
  for (int j = 0; j < DIM; ++j) w[j] = 0.5 - 0.1 * j;
}

/* What a rank trains with on one group: the unit, its momentum, the
 * snapshot of both, and the step (in every shard). */
typedef struct {
  dk_group_t* group;
  dk_shard_t* unit;
  double* w; /* the unit's shard of the weights (dk_shard_local) */
  double* m; /* the momentum's shard: the same elements */
  int64_t local;
  int64_t step;
  dk_sharded_snapshot_t* snapshot;
} trainer_t;

/* A unit over `group` with the initial weights (replaced by a load when
 * recovering), zero momentum, and an empty snapshot of the three. */
static void start(trainer_t* t, dk_group_t* group) {
  dk_error_t* err = NULL;
  double w[DIM];
  initial_weights(w);
  int64_t n = DIM;
  DLTensor tw = dk_test_host_tensor(w, &n, 1, kDLFloat, 64);
  DLTensor* params[1] = {&tw};
  const char* names[1] = {"w"};
  t->group = group;
  if (dk_shard_create(group, params, 1, names, NULL, &t->unit, &err) != DK_OK)
    dk_test_die("dk_shard_create", err);
  void* grad = NULL;
  dk_dtype_t dtype;
  if (dk_shard_local(t->unit, 0, (void**)&t->w, &grad, &t->local, &dtype,
                     &err) != DK_OK)
    dk_test_die("dk_shard_local", err);
  dk_test_check(dtype == DK_FLOAT64, "a float64 flat buffer");
  t->m = calloc((size_t)t->local, sizeof(double));
  if (dk_sharded_snapshot_create(&t->snapshot, &err) != DK_OK ||
      dk_sharded_snapshot_register(t->snapshot, "w", t->w,
                                   (size_t)t->local * sizeof(double),
                                   &err) != DK_OK ||
      dk_sharded_snapshot_register(t->snapshot, "momentum", t->m,
                                   (size_t)t->local * sizeof(double),
                                   &err) != DK_OK ||
      dk_sharded_snapshot_register(t->snapshot, "step", &t->step,
                                   sizeof(t->step), &err) != DK_OK) {
    dk_test_die("register", err);
  }
}

static void stop(trainer_t* t) {
  dk_sharded_snapshot_destroy(t->snapshot);
  dk_shard_destroy(t->unit);
  free(t->m);
  memset(t, 0, sizeof(*t));
}

static const void* shard_buffer(dk_sharded_snapshot_t* s, int index, int buffer,
                                size_t* bytes) {
  dk_error_t* err = NULL;
  const void* data = NULL;
  if (dk_sharded_snapshot_shard(s, index, buffer, &data, bytes, &err) != DK_OK)
    dk_test_die("dk_sharded_snapshot_shard", err);
  return data;
}

/* The survivors' (or the replacement's) new trainer on `group`, from what
 * `old` fetched there (NULL for a replacement, which holds nothing): the
 * weights through dk_shard_load_sharded, the momentum by the same layout
 * (shard j of W holds elements [j*S, (j+1)*S) of the padded flat buffer),
 * the step from any shard; then a first commit of the new layout. Returns
 * the commit loaded. */
static int64_t rebuild(trainer_t* t, dk_sharded_snapshot_t* old,
                       dk_group_t* group, int same_layout) {
  dk_error_t* err = NULL;
  dk_sharded_snapshot_t* empty = NULL;
  if (old == NULL) {
    if (dk_sharded_snapshot_create(&empty, &err) != DK_OK)
      dk_test_die("create", err);
    old = empty;
  }
  const int32_t me = dk_group_rank(group);
  int64_t commit = 0;
  int32_t world = 0;
  if (dk_sharded_snapshot_fetch(old, group, same_layout ? &me : NULL,
                                same_layout ? 1 : 0, &commit, &world,
                                &err) != DK_OK) {
    dk_test_die("dk_sharded_snapshot_fetch", err);
  }
  dk_test_check(!same_layout || world == dk_group_size(group),
                "the same layout when the group kept its size");
  start(t, group);
  DLTensor* saved = calloc((size_t)world, sizeof(DLTensor));
  const DLTensor** ptrs = calloc((size_t)world, sizeof(DLTensor*));
  int64_t* shapes = calloc((size_t)world, sizeof(int64_t));
  const double** old_m = calloc((size_t)world, sizeof(double*));
  int64_t old_local = 0;
  for (int j = 0; j < world; ++j) {
    if (same_layout && j != me) continue;
    size_t bytes = 0, mbytes = 0, sbytes = 0;
    double* w = (double*)shard_buffer(old, j, 0, &bytes);
    old_m[j] = (const double*)shard_buffer(old, j, 1, &mbytes);
    const int64_t* step = (const int64_t*)shard_buffer(old, j, 2, &sbytes);
    dk_test_check(mbytes == bytes && sbytes == sizeof(int64_t),
                  "a shard's buffers");
    old_local = (int64_t)(bytes / sizeof(double));
    t->step = *step;
    shapes[j] = old_local;
    saved[j] = dk_test_host_tensor(w, &shapes[j], 1, kDLFloat, 64);
    ptrs[j] = &saved[j];
  }
  if (dk_shard_load_sharded(t->unit, world, ptrs, (size_t)world, &err) != DK_OK)
    dk_test_die("dk_shard_load_sharded", err);
  const int64_t first = (int64_t)dk_group_rank(group) * t->local;
  for (int64_t i = 0; i < t->local; ++i) {
    const int64_t at = first + i, j = at / old_local;
    t->m[i] = at < DIM ? old_m[j][at % old_local] : 0.0;
  }
  free(saved);
  free(ptrs);
  free(shapes);
  free(old_m);
  dk_sharded_snapshot_destroy(empty);
  if (dk_sharded_snapshot_commit(t->snapshot, group, &err) != DK_OK)
    dk_test_die("the new layout's first commit", err);
  return commit;
}

/* One step: the full weights, this rank's part of the batch (scaled so that
 * the average over ranks is the batch's mean), the reduction, then SGD with
 * momentum on the shard. Returns the reduction's status. */
static dk_status_t train_step(trainer_t* t, int victim_dies, dk_error_t** err) {
  const int n = dk_group_size(t->group), r = dk_group_rank(t->group);
  if (dk_shard_unshard(t->unit, err) != DK_OK) return dk_error_code(*err);
  double* full = NULL;
  if (dk_shard_full_param(t->unit, 0, (void**)&full, err) != DK_OK)
    dk_test_die("dk_shard_full_param", *err);
  double g[DIM];
  dk_test_gradient(t->step, r * DK_TEST_GLOBAL_BATCH / n,
                   (r + 1) * DK_TEST_GLOBAL_BATCH / n, full, g, DIM);
  for (int j = 0; j < DIM; ++j) g[j] *= (double)n / DK_TEST_GLOBAL_BATCH;
  if (dk_shard_reshard(t->unit, err) != DK_OK)
    dk_test_die("dk_shard_reshard", *err);
  int64_t len = DIM;
  DLTensor tg = dk_test_host_tensor(g, &len, 1, kDLFloat, 64);
  if (dk_shard_accumulate_grad(t->unit, 0, &tg, err) != DK_OK)
    dk_test_die("dk_shard_accumulate_grad", *err);
  if (victim_dies) {
    printf("rank %d: SIGKILL in step %lld\n", dk_test_rank, (long long)t->step);
    raise(SIGKILL);
  }
  if (dk_shard_reduce_grads(t->unit, err) != DK_OK) return dk_error_code(*err);
  void *data = NULL, *grad = NULL;
  int64_t local = 0;
  dk_dtype_t dtype;
  if (dk_shard_local(t->unit, 0, &data, &grad, &local, &dtype, err) != DK_OK)
    dk_test_die("dk_shard_local", *err);
  for (int64_t i = 0; i < local; ++i) {
    t->m[i] = DK_TEST_BETA * t->m[i] + ((double*)grad)[i];
    t->w[i] -= DK_TEST_LR * t->m[i];
  }
  dk_shard_zero_grads(t->unit);
  return DK_OK;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  dk_test_elastic_run_t run;
  dk_group_t* group = dk_test_elastic_join(argc, argv, &run);
  dk_error_t* err = NULL;

  /* On the heap: the snapshot holds the trainer's step by address, so a
   * trainer never moves. */
  trainer_t* t = calloc(1, sizeof(trainer_t));
  int recoveries = 0, steps_run = 0;
  if (run.newcomer) {
    /* dk_init joined the survivors' grow; it holds nothing to fetch from. */
    const int64_t commit = rebuild(t, NULL, group, 1);
    dk_test_elastic_check_commit(&run, group, "fetched", commit, t->step, 0);
  } else {
    start(t, group);
    if (dk_sharded_snapshot_commit(t->snapshot, group, &err) != DK_OK)
      dk_test_die("the first commit", err);
  }
  while (t->step < DK_TEST_STEPS) {
    const int victim = !run.newcomer && recoveries == 0 &&
                       dk_test_rank == DK_TEST_VICTIM && t->step == run.die_at;
    dk_status_t s = train_step(t, victim, &err);
    if (s != DK_OK) {
      int grown = 0;
      dk_group_t* next =
          dk_test_elastic_recover(&run, group, t->step, s, &err, &grown);
      trainer_t* fresh = calloc(1, sizeof(trainer_t));
      /* The old snapshot stays until the new layout's first commit. */
      const int64_t commit = rebuild(fresh, t->snapshot, next, grown);
      stop(t);
      free(t);
      dk_group_destroy(group);
      group = next;
      t = fresh;
      ++recoveries;
      dk_test_elastic_check_commit(&run, group, "fetched", commit, t->step,
                                   grown);
      continue;
    }
    ++t->step;
    ++steps_run;
    if (t->step % DK_TEST_COMMIT_EVERY == 0 &&
        dk_sharded_snapshot_commit(t->snapshot, group, &err) != DK_OK) {
      dk_test_die("commit", err);
    }
  }
  /* The snapshot holds this rank's shard and its neighbour's: 2/N of the
   * state (each shard's buffers from 64-byte boundaries after a header). */
  const int64_t blob = 64 + 2 * ((t->local * 8 + 63) / 64 * 64) + 64;
  const int n = dk_group_size(group);
  dk_test_check(
      dk_sharded_snapshot_bytes(t->snapshot) == (n > 1 ? 2 : 1) * blob,
      "the snapshot holds two shards");
  double w[DIM], want[DIM];
  int64_t dim = DIM;
  DLTensor tw = dk_test_host_tensor(w, &dim, 1, kDLFloat, 64);
  DLTensor* outs[1] = {&tw};
  if (dk_shard_gather_full(t->unit, outs, 1, 0, &err) != DK_OK)
    dk_test_die("dk_shard_gather_full", err);
  initial_weights(want);
  dk_test_reference(want, DIM);
  const double bad =
      dk_test_elastic_verdict(&run, group, recoveries, steps_run, w, want, DIM);
  stop(t);
  free(t);
  dk_group_destroy(group);
  dk_shutdown();
  return dk_test_elastic_exit(&run, bad, steps_run);
}
