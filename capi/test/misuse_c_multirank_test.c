/* Misuse through the C ABI, in every rank of a real job: each case used to
 * hang, crash or answer wrongly, and must now be a clear status.
 * - dk_init after dk_shutdown, three times in one process: each world is
 *   separate (it used to read the previous world's rendezvous keys);
 * - sizes no buffer can have (a byte size that overflows, SIZE_MAX store
 *   values, counts larger than any array, all_to_all splits whose sum wraps
 *   around int64, a local group past the world, a negative collect_results
 *   size): DK_INVALID_ARGUMENT, nothing read;
 * - an int64 bucket size beyond int: not wrapped into a small one; a
 *   reducer's bucket size that is not finite: DK_INVALID_ARGUMENT;
 * - destroyed subgroup and parallel-state handles (and a parallel state
 *   made from a destroyed group): -1, NULL and DK_FAILED_PRECONDITION,
 *   never the world's values;
 * - a non-member's sync_random_seed and all_gather_object:
 *   DK_FAILED_PRECONDITION, as the header says;
 * - a store key that is not UTF-8: DK_INVALID_ARGUMENT with a reason;
 * - dk_group_abort on another thread beside dk_group_destroy: no crash. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

/* The call's status is `want`, its message contains `text` (if any). */
#define EXPECT(call, want, text, what)   \
  do {                                   \
    err = NULL;                          \
    dk_status_t got_ = (call);           \
    expect(got_, err, want, text, what); \
  } while (0)
static void expect(dk_status_t got, dk_error_t* err, dk_status_t want,
                   const char* text, const char* what) {
  const char* msg = err != NULL ? dk_error_message(err) : "";
  int ok = got == want && (text == NULL || strstr(msg, text) != NULL);
  if (!ok) {
    fprintf(stderr, "rank %d: CHECK FAILED: %s: status %d (want %d): %s\n",
            dk_test_rank, what, (int)got, (int)want, msg);
    ++dk_test_failures;
  }
  if (err != NULL) dk_error_free(err);
}

static void reinit_rounds(void) {
  for (int round = 1; round <= 3; ++round) {
    dk_group_t* world = dk_test_init(NULL, 30000);
    dk_error_t* err = NULL;
    const int size = dk_group_size(world);
    double x = (double)(dk_test_rank + 1) * round;
    int64_t one = 1;
    DLTensor t = dk_test_host_tensor(&x, &one, 1, kDLFloat, 64);
    if (dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err) != DK_OK)
      dk_test_die("all_reduce", err);
    dk_test_check(x == (double)round * size * (size + 1) / 2,
                  "each world's all_reduce sums that world's values");
    if (round < 3) {
      dk_group_destroy(world);
      dk_shutdown();
      dk_test_check(!dk_is_distributed(), "shut down");
    } else {
      dk_group_destroy(world); /* the default group lives on until shutdown */
    }
  }
}

static void sizes_no_buffer_can_have(void) {
  dk_error_t* err = NULL;
  float f = 0;
  int64_t huge[1] = {(int64_t)1 << 62};
  DLTensor t = dk_test_host_tensor(&f, huge, 1, kDLFloat, 32);
  EXPECT(dk_group_all_reduce(NULL, &t, DK_OP_SUM, NULL, &err),
         DK_INVALID_ARGUMENT, "largest buffer", "2^62 float32 elements");
  err = NULL;
  int64_t overflow[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  t = dk_test_host_tensor(&f, overflow, 2, kDLFloat, 32);
  EXPECT(dk_group_broadcast(NULL, &t, 0, NULL, &err), DK_INVALID_ARGUMENT,
         "overflows", "an element count that overflows int64");

  dk_store_t* store = NULL;
  err = NULL;
  if (dk_default_store(&store, &err) != DK_OK)
    dk_test_die("dk_default_store", err);
  EXPECT(dk_store_set(store, "k", &f, SIZE_MAX, &err), DK_INVALID_ARGUMENT,
         "request limit", "a SIZE_MAX store value");
  EXPECT(dk_store_append(store, "k", &f, SIZE_MAX / 2, &err),
         DK_INVALID_ARGUMENT, "request limit", "a huge append");
  const char* keys[1] = {"k"};
  dk_bytes_t values[1] = {{&f, sizeof(f)}};
  EXPECT(dk_store_multi_set(store, keys, values, SIZE_MAX, &err),
         DK_INVALID_ARGUMENT, "larger than any array", "num_keys SIZE_MAX");
  EXPECT(dk_store_set(store, "bad\xff\xfekey", "v", 1, &err),
         DK_INVALID_ARGUMENT, "not valid UTF-8", "a key that is not UTF-8");
  dk_store_destroy(store);

  int32_t ranks[1] = {0};
  dk_group_t* g = NULL;
  EXPECT(dk_group_new(NULL, ranks, (size_t)1 << 40, &g, &err),
         DK_INVALID_ARGUMENT, "num_ranks", "num_ranks beyond the group");
  int64_t splits[1] = {1};
  float in[8] = {0}, out[8] = {0};
  int64_t n = 8;
  DLTensor tin = dk_test_host_tensor(in, &n, 1, kDLFloat, 32);
  DLTensor tout = dk_test_host_tensor(out, &n, 1, kDLFloat, 32);
  EXPECT(
      dk_group_all_to_all(NULL, &tin, splits, &tout, splits, 1000, NULL, &err),
      DK_INVALID_ARGUMENT, "num_splits", "num_splits != group size");
  /* Splits whose running sum wraps around int64 back to numel (2 here):
   * with 3 or more ranks, 3 x (2^64 + 2) / 3 used to pass the check. */
  const int size = dk_group_size(NULL);
  int64_t* wrap = calloc((size_t)size, sizeof(int64_t));
  for (int r = 0; r < size && r < 3; ++r)
    wrap[r] = size >= 3 ? (int64_t)(UINT64_MAX / 3 + 1) : INT64_MAX;
  n = 2;
  tin = dk_test_host_tensor(in, &n, 1, kDLFloat, 32);
  tout = dk_test_host_tensor(out, &n, 1, kDLFloat, 32);
  EXPECT(dk_group_all_to_all(NULL, &tin, wrap, &tout, wrap, (size_t)size, NULL,
                             &err),
         DK_INVALID_ARGUMENT, "input_splits[0] is", "splits that wrap int64");
  free(wrap);
  dk_bytes_t* items = NULL;
  size_t count = 0;
  EXPECT(dk_group_all_gather_object(NULL, &f, SIZE_MAX, &items, &count, &err),
         DK_INVALID_ARGUMENT, "larger than any array",
         "an object of SIZE_MAX bytes");
  EXPECT(dk_group_collect_results(NULL, NULL, 0, -1, "cpu", NULL, &items,
                                  &count, &err),
         DK_INVALID_ARGUMENT, "size is -1", "a negative collect_results size");
  /* A local group past the world: 3 * 2^30 used to wrap int and push 2^30
   * ranks before the group was refused. */
  EXPECT(dk_init_local_group(2, 1 << 30, &err), DK_INVALID_ARGUMENT,
         "beyond the world size", "nodes of 2^30 ranks");
  EXPECT(dk_init_local_group(1, size, &err), DK_INVALID_ARGUMENT,
         "beyond the world size", "a second node of the whole world");
}

/* bucket_size_mb is int64: 2^32 + 1 (and -(2^32 - 1)) used to be cut to
 * int's 1 MiB, so rank 0 all-reduced 1 MiB buckets where the others, asking
 * for one bucket per dtype, all-reduced one: a mismatch. */
#define HALF_MIB_FLOATS (1 << 18) /* 1 MiB of float32 */
static float first_half[HALF_MIB_FLOATS], second_half[HALF_MIB_FLOATS];

static void bucket_sizes_beyond_int(void) {
  const int size = dk_group_size(NULL);
  const int64_t mine[2] = {((int64_t)1 << 32) + 1, -(((int64_t)1 << 32) - 1)};
  const int64_t others[2] = {0, -1};
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < HALF_MIB_FLOATS; ++i)
      first_half[i] = second_half[i] = 1;
    int64_t n = HALF_MIB_FLOATS;
    DLTensor a = dk_test_host_tensor(first_half, &n, 1, kDLFloat, 32);
    DLTensor b = dk_test_host_tensor(second_half, &n, 1, kDLFloat, 32);
    DLTensor* both[2] = {&a, &b};
    dk_error_t* err = NULL;
    EXPECT(dk_group_all_reduce_coalesced(
               NULL, both, 2, DK_OP_SUM, 1,
               dk_test_rank == 0 ? mine[k] : others[k], &err),
           DK_OK, NULL, "a bucket size beyond int is one bucket");
    dk_test_check(first_half[0] == (float)size &&
                      second_half[HALF_MIB_FLOATS - 1] == (float)size,
                  "the coalesced sums");
  }
}

/* A reducer's bucket size that is not a finite number of MiB (NaN, inf,
 * 1e300) is refused on every rank, before anything moves (its conversion to
 * bytes was undefined behaviour). */
static void reducer_bucket_sizes_not_finite(void) {
  float w[4] = {0};
  int64_t n = 4;
  DLTensor p = dk_test_host_tensor(w, &n, 1, kDLFloat, 32);
  DLTensor* params[1] = {&p};
  const double bad[3] = {NAN, INFINITY, 1e300};
  for (int k = 0; k < 3; ++k) {
    dk_reducer_config_t config;
    dk_reducer_config_init(&config);
    config.bucket_cap_mb = bad[k];
    dk_reducer_t* reducer = NULL;
    dk_error_t* err = NULL;
    EXPECT(dk_reducer_create(NULL, params, 1, NULL, 0, &config, &reducer, &err),
           DK_INVALID_ARGUMENT, "bucket sizes", "a bucket size not finite");
    dk_test_check(reducer == NULL, "no reducer for a bucket size not finite");
  }
}

static void destroyed_handles_and_non_members(void) {
  dk_error_t* err = NULL;
  int32_t first[1] = {0};
  dk_group_t* sub = NULL;
  if (dk_group_new(NULL, first, 1, &sub, &err) != DK_OK)
    dk_test_die("dk_group_new", err);
  if (dk_test_rank != 0) {
    int32_t seed = 0;
    EXPECT(dk_group_sync_random_seed(sub, &seed, &err), DK_FAILED_PRECONDITION,
           "not a member", "a non-member's sync_random_seed");
    dk_bytes_t* items = NULL;
    size_t count = 0;
    EXPECT(dk_group_all_gather_object(sub, "x", 1, &items, &count, &err),
           DK_FAILED_PRECONDITION, "not a member",
           "a non-member's all_gather_object");
  }
  dk_group_destroy(sub);
  dk_test_check(dk_group_rank(sub) == -1, "destroyed group: rank -1");
  dk_test_check(dk_group_size(sub) == -1, "destroyed group: size -1");
  dk_test_check(dk_group_name(sub) == NULL, "destroyed group: name NULL");
  dk_test_check(dk_group_backend(sub) == NULL, "destroyed group: backend NULL");
  dk_test_check(dk_group_global_rank(sub, 0) == -1,
                "destroyed group: no ranks");
  float f = 1;
  int64_t one = 1;
  DLTensor t = dk_test_host_tensor(&f, &one, 1, kDLFloat, 32);
  EXPECT(dk_group_all_reduce(sub, &t, DK_OP_SUM, NULL, &err),
         DK_FAILED_PRECONDITION, "destroyed",
         "all_reduce on a destroyed group");

  /* A destroyed group is refused, not read as the world (its rep is gone). */
  dk_parallel_state_t* state = NULL;
  EXPECT(dk_parallel_state_create(DK_GROUP_UNUSED, sub, NULL, &state, &err),
         DK_FAILED_PRECONDITION, "tensor_parallel: the handle was destroyed",
         "a parallel state over a destroyed group");
  dk_test_check(state == NULL, "no state over a destroyed group");
  dk_parallel_state_destroy(state);
  state = NULL;
  err = NULL;
  if (dk_parallel_state_create(NULL, NULL, NULL, &state, &err) != DK_OK)
    dk_test_die("dk_parallel_state_create", err);
  dk_test_check(
      dk_parallel_state_size(state, DK_PARALLEL_DATA) == dk_group_size(NULL),
      "a live state answers with its group");
  dk_parallel_state_destroy(state);
  dk_test_check(dk_parallel_state_rank(state, DK_PARALLEL_DATA) == -1,
                "destroyed state: rank -1");
  dk_test_check(dk_parallel_state_size(state, DK_PARALLEL_DATA) == -1,
                "destroyed state: size -1");
  char* text = NULL;
  EXPECT(dk_parallel_state_describe(state, &text, &err), DK_FAILED_PRECONDITION,
         "destroyed", "describe a destroyed state");
  dk_parallel_state_destroy(state); /* twice is harmless */
}

/* dk_group_abort from another thread beside dk_group_destroy (convention
 * 13: any thread): the abort finds the group or a destroyed handle, never a
 * group half released (it used to read the handle's group while destroy
 * released it: a crash within a few hundred rounds). */
static atomic_int aborting;
static dk_group_t* _Atomic abort_target;
static void* abort_loop(void* unused) {
  (void)unused;
  while (atomic_load(&aborting)) {
    dk_group_t* g = atomic_load(&abort_target);
    if (g != NULL) dk_group_abort(g);
  }
  return NULL;
}

static void abort_beside_destroy(void) {
  const int size = dk_group_size(NULL);
  int32_t everyone[64];
  for (int r = 0; r < size && r < 64; ++r) everyone[r] = r;
  atomic_store(&aborting, 1);
  pthread_t aborter;
  if (pthread_create(&aborter, NULL, abort_loop, NULL) != 0) {
    dk_test_check(0, "pthread_create");
    return;
  }
  int wrong = 0;
  for (int round = 0; round < 300; ++round) {
    dk_error_t* err = NULL;
    dk_group_t* sub = NULL;
    if (dk_group_new(NULL, everyone, (size_t)size, &sub, &err) != DK_OK)
      dk_test_die("dk_group_new", err);
    atomic_store(&abort_target, sub);
    for (volatile int spin = 0; spin < (round % 7) * 200; ++spin) {
    }
    dk_group_destroy(sub);
    wrong += dk_group_rank(sub) != -1;
    /* Handles stay reserved: the aborter may still hold this one. */
  }
  atomic_store(&aborting, 0);
  pthread_join(aborter, NULL);
  dk_test_check(wrong == 0, "a destroyed group answers -1");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  reinit_rounds();
  sizes_no_buffer_can_have();
  bucket_sizes_beyond_int();
  reducer_bucket_sizes_not_finite();
  destroyed_handles_and_non_members();
  abort_beside_destroy();
  dk_error_t* err = NULL;
  if (dk_group_barrier(NULL, NULL, &err) != DK_OK) dk_test_die("barrier", err);
  dk_shutdown();
  if (dk_test_failures == 0)
    printf("rank %d: misuse answered with statuses\n", dk_test_rank);
  return dk_test_failures == 0 ? 0 : 1;
}
