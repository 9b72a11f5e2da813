/* A subgroup's own timeouts (dk_group_new_with_options, ABI 0.11), as
 * torch's new_group(ranks, timeout=...) asks: the world's operations wait
 * up to 120 s, a subgroup's 3 s. Creations that must succeed get a
 * connect_timeout_ms of 60 s, so a loaded machine cannot fail them.
 * 1. A subgroup of every rank (collective, unnamed) with timeout_ms 3000:
 *    an all_reduce is checked, then the last rank skips one; the others must
 *    end it with DK_DEADLINE_EXCEEDED within 15 s (the world's 120 s
 *    timeout could not), naming the subgroup.
 * 2. A named subgroup of every rank but the last, then one of every rank
 *    that the last rank never creates, connect_timeout_ms 3000: the others'
 *    creation ends in DK_DEADLINE_EXCEEDED within 15 s.
 * 3. NULL options is dk_group_new; a bad name or struct_size is refused.
 * The margins are seconds against a 120 s alternative, so a loaded machine
 * cannot decide the outcome. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

#define WORLD_TIMEOUT_MS 120000
#define SUBGROUP_TIMEOUT_MS 3000
#define SURE_CONNECT_MS 60000
#define BOUND_S 15.0

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* All_reduce (SUM) of rank + 1 over `group` of `n` members, checked. */
static void checked_sum(dk_group_t* group, int n, const char* what) {
  float x = (float)(dk_group_rank(group) + 1);
  int64_t len = 1;
  DLTensor t = dk_test_float_vector(&x, &len);
  dk_error_t* err = NULL;
  if (dk_group_all_reduce(group, &t, DK_OP_SUM, NULL, &err) != DK_OK)
    dk_test_die(what, err);
  dk_test_check(x == (float)(n * (n + 1) / 2), what);
}

/* `s` must be DK_DEADLINE_EXCEEDED, within BOUND_S of `start`, with a
 * message naming `group_name`. Frees *err and clears it. */
static void check_deadline(dk_status_t s, dk_error_t** errp, double start,
                           const char* group_name, const char* what) {
  const double took = now_s() - start;
  dk_error_t* err = *errp;
  if (s != DK_DEADLINE_EXCEEDED) {
    fprintf(stderr, "rank %d: %s gave %d (%s), not DEADLINE_EXCEEDED\n",
            dk_test_rank, what, (int)s,
            s == DK_OK ? "" : dk_error_message(err));
    ++dk_test_failures;
  } else {
    printf("rank %d: %s: DEADLINE_EXCEEDED after %.1f s: %s\n", dk_test_rank,
           what, took, dk_error_message(err));
    dk_test_check(took < BOUND_S, "the subgroup's own timeout bounds it");
    dk_test_check(strstr(dk_error_message(err), group_name) != NULL,
                  "the error names the subgroup");
  }
  if (s != DK_OK) dk_error_free(err);
  *errp = NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  dk_group_t* world = dk_test_init(NULL, WORLD_TIMEOUT_MS);
  const int size = dk_group_size(world);
  const int last = size - 1;
  dk_test_require(size >= 2, "the job has 2 ranks or more");
  int all[8];
  for (int r = 0; r < size; ++r) all[r] = r;
  dk_error_t* err = NULL;

  dk_group_options_t opts;
  dk_group_options_init(&opts);
  dk_test_check(opts.struct_size == sizeof(opts) && opts.name == NULL &&
                    opts.timeout_ms == 0 && opts.connect_timeout_ms == 0,
                "dk_group_options_init's defaults");

  /* 1. An unnamed subgroup of every rank with a short op timeout. */
  opts.timeout_ms = SUBGROUP_TIMEOUT_MS;
  opts.connect_timeout_ms = SURE_CONNECT_MS;
  dk_group_t* quick = NULL;
  if (dk_group_new_with_options(world, all, size, &opts, &quick, &err) != DK_OK)
    dk_test_die("dk_group_new_with_options (unnamed)", err);
  checked_sum(quick, size, "a sum on the subgroup");
  if (dk_test_rank != last) {
    float x = 1.0f;
    int64_t len = 1;
    DLTensor t = dk_test_float_vector(&x, &len);
    const double start = now_s();
    dk_status_t s = dk_group_all_reduce(quick, &t, DK_OP_SUM, NULL, &err);
    check_deadline(s, &err, start, dk_group_name(quick),
                   "an all_reduce the last rank skips");
  }
  /* The last rank keeps its handle until the others have failed (the world's
   * sum waits for them): a destroyed peer would end their wait otherwise. */
  checked_sum(world, size, "the world still works after its subgroup failed");
  dk_group_destroy(quick);

  /* 2. Named, members only: every rank but the last, then every rank with
   * the last one absent from the creation. */
  dk_group_options_init(&opts);
  opts.name = "head";
  opts.connect_timeout_ms = SURE_CONNECT_MS;
  if (dk_test_rank != last) {
    dk_group_t* head = NULL;
    if (dk_group_new_with_options(world, all, size - 1, &opts, &head, &err) !=
        DK_OK)
      dk_test_die("dk_group_new_with_options (named)", err);
    dk_test_check(strstr(dk_group_name(head), "head") != NULL,
                  "the named subgroup carries its name");
    checked_sum(head, size - 1, "a sum on the named subgroup");
    dk_group_destroy(head);

    opts.name = "never-complete";
    opts.connect_timeout_ms = SUBGROUP_TIMEOUT_MS;
    dk_group_t* never = NULL;
    const double start = now_s();
    dk_status_t s =
        dk_group_new_with_options(world, all, size, &opts, &never, &err);
    check_deadline(s, &err, start, "never-complete",
                   "creating a group one member never creates");
    dk_test_check(never == NULL, "no group from a failed creation");
  }
  checked_sum(world, size, "the world after the failed creation");

  /* 3. NULL options: dk_group_new; bad arguments. */
  dk_group_t* plain = NULL;
  if (dk_group_new_with_options(world, all, size, NULL, &plain, &err) != DK_OK)
    dk_test_die("dk_group_new_with_options (NULL options)", err);
  checked_sum(plain, size, "a sum on a subgroup made with NULL options");
  dk_group_destroy(plain);
  dk_group_options_init(&opts);
  opts.name = "a/b";
  dk_test_check(dk_group_new_with_options(world, all, size, &opts, &plain,
                                          &err) == DK_INVALID_ARGUMENT,
                "a name with '/' is refused");
  dk_error_free(err);
  err = NULL;
  dk_group_options_init(&opts);
  opts.struct_size = 4;
  dk_test_check(dk_group_new_with_options(world, all, size, &opts, &plain,
                                          &err) == DK_INVALID_ARGUMENT,
                "a struct_size smaller than any version is refused");
  dk_error_free(err);

  dk_group_destroy(world);
  dk_shutdown();
  if (dk_test_failures == 0) printf("rank %d: PASSED\n", dk_test_rank);
  return dk_test_failures == 0 ? 0 : 1;
}
