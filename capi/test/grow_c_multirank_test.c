/* Elastic recovery through the C ABI, under distrun --max-replacements 1:
 * N ranks run checked all_reduces; before step DIE_AT rank 1 SIGKILLs
 * itself. The survivors' step fails; they shrink the default group and run
 * checked steps at N - 1; then they grow (dk_group_grow) while distrun's new
 * process for rank 1 (DISTKIT_REPLACEMENT=1) enters through dk_init, which
 * joins the same grow. Everyone then holds a world of N again, in the
 * original rank order (an all_gather of world ranks says so), the newcomer
 * gets the step counter by broadcast, and the steps at N are checked again.
 * With the argument "direct" the survivors grow straight from the poisoned
 * world, without shrinking. At world size 2 the lone survivor shrinks to a
 * group of one (its steps there sum its own values alone) and grows from it,
 * or, "direct", from the poisoned world, passing a timeout of 0 (the
 * group's) while the replacement comes a second late. Without "direct" the
 * replacement's first dk_init gives up (a connect timeout of FIRST_TRY_MS,
 * before the survivors grow): DK_DEADLINE_EXCEEDED naming the survivors'
 * ranks, with generation 1 sealed as failed for all to see, so the
 * survivors' dk_group_grow_pending is 0; its second dk_init then joins their
 * grow, in generation 2. After the grow each rank above 0 calls
 * dk_group_grow with a world size of 1: DK_INVALID_ARGUMENT naming its world
 * rank, and the grown group works on. Every expected sum is
 * computed here from the formula, for the members each phase must have; a
 * failed check exits 1, which the spent replacement budget turns into the job's
 * failure. DISTKIT_TEST_HOSTS=H: the ranks declare H "hosts" of consecutive
 * ranks (hierarchical groups), as testing/cc/rank_env.cc does for the C++
 * checks: rank 1 then dies on host 0 and the other host must learn of it from
 * its leader's closed links, in time for the shrink. */
#define _POSIX_C_SOURCE 200809L /* SIGKILL */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "distkit/distkit.h"
#include "testing/c/declared_hosts.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

#define DIM 5
#define VICTIM 1
#define DIE_AT 3
#define SHRUNK_STEPS 3
#define GROWN_STEPS 3
#define TIMEOUT_MS 20000
/* The replacement's first dk_init, which the survivors let time out. */
#define FIRST_TRY_MS 1000
/* How long a survivor waits for the replacement's first try to end, or for
 * its second to register; the store key the survivors release it with. */
#define WAIT_MS 15000
#define RETRY_KEY "grow_c_test/retry"

/* World rank r's contribution at `step`. */
static double value(int step, int r, int i) {
  return (step + 1) * 100.0 + (r + 1) * (i + 1);
}

/* One all_reduce (SUM) at `step` on `group`; checks the sum over the world
 * ranks `members`. Returns the status (the data is checked only on OK). */
static dk_status_t step_on(dk_group_t* group, int step, const int* members,
                           int n, dk_error_t** err) {
  double v[DIM];
  for (int i = 0; i < DIM; ++i) v[i] = value(step, dk_test_rank, i);
  int64_t len = DIM;
  DLTensor t = dk_test_host_tensor(v, &len, 1, kDLFloat, 64);
  dk_status_t s = dk_group_all_reduce(group, &t, DK_OP_SUM, NULL, err);
  if (s != DK_OK) return s;
  for (int i = 0; i < DIM; ++i) {
    double want = 0;
    for (int k = 0; k < n; ++k) want += value(step, members[k], i);
    if (v[i] != want) {
      fprintf(stderr, "rank %d: step %d [%d] = %g, want %g\n", dk_test_rank,
              step, i, v[i], want);
      dk_test_check(0, "all_reduce sums the members' values");
    }
  }
  return DK_OK;
}

/* The world ranks of `group`'s members, in group order, by all_gather. */
static void check_order(dk_group_t* group, const int* members, int n) {
  int64_t in = dk_test_rank, out[8] = {0};
  int64_t one = 1, all = n;
  DLTensor ti = dk_test_host_tensor(&in, &one, 1, kDLInt, 64);
  DLTensor to = dk_test_host_tensor(out, &all, 1, kDLInt, 64);
  dk_error_t* err = NULL;
  if (dk_group_all_gather(group, &ti, &to, NULL, &err) != DK_OK)
    dk_test_die("all_gather", err);
  for (int k = 0; k < n; ++k)
    dk_test_check(out[k] == members[k],
                  "group ranks in the original world order");
}

/* "0,2,3": the world ranks in `ranks`, as the grow's errors list them. */
static void rank_list(const int* ranks, int n, char* out, size_t size) {
  size_t at = 0;
  out[0] = '\0';
  for (int k = 0; k < n && at < size; ++k)
    at += (size_t)snprintf(out + at, size - at, k ? ",%d" : "%d", ranks[k]);
}

/* The replacement's first dk_init, before the survivors grow: it gives up
 * after FIRST_TRY_MS with the grow's own error, naming the survivors, and
 * (seen by them) seals the generation as failed. Then it waits for the
 * survivors' word, through the job's store, before it tries again. */
static void first_try_times_out(const int* survivors, int n_survivors) {
  dk_init_config_t config;
  dk_init_config_init(&config);
  config.timeout_ms = TIMEOUT_MS;
  config.connect_timeout_ms = FIRST_TRY_MS;
  dk_group_t* none = NULL;
  dk_error_t* err = NULL;
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  dk_status_t s = dk_init("pytorch", &config, &none, &err);
  clock_gettime(CLOCK_MONOTONIC, &end);
  const double took_ms =
      (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6;
  const char* message = err != NULL ? dk_error_message(err) : "";
  printf("rank %d: first dk_init: status %d after %.0f ms: %s\n", dk_test_rank,
         (int)s, took_ms, message);
  dk_test_check(s == DK_DEADLINE_EXCEEDED,
                "the replacement's first try times out: DK_DEADLINE_EXCEEDED");
  dk_test_check(took_ms >= FIRST_TRY_MS * 0.9,
                "the first try waited its connect timeout for the survivors");
  char list[64], want[96];
  rank_list(survivors, n_survivors, list, sizeof(list));
  snprintf(want, sizeof(want), "rank(s) %s did not arrive", list);
  dk_test_check(strstr(message, want) != NULL,
                "the timed-out try names the survivors that did not arrive");
  dk_error_free(err);
  err = NULL;
  dk_store_config_t sc;
  dk_store_config_init(&sc);
  sc.address = getenv("DISTKIT_STORE");
  sc.token = getenv("DISTKIT_TOKEN");
  sc.timeout_ms = WAIT_MS;
  sc.connect_timeout_ms = WAIT_MS;
  dk_test_require(sc.address != NULL, "distrun names its store");
  dk_store_t* store = NULL;
  if (dk_store_connect(&sc, &store, &err) != DK_OK)
    dk_test_die("connecting to the job's store", err);
  const char* key = RETRY_KEY;
  if (dk_store_wait(store, &key, 1, WAIT_MS, &err) != DK_OK)
    dk_test_die("waiting for the survivors' word to try again", err);
  dk_store_destroy(store);
}

/* The survivors, before they grow: the replacement's first try sealed
 * generation 1 as failed, naming them, and left no registration behind
 * (grow_pending is 0); once all have seen that, rank 0 lets it try again,
 * and they wait until its second try is pending. */
static void after_first_try(const int* survivors, int n_survivors) {
  dk_error_t* err = NULL;
  dk_store_t* store = NULL;
  if (dk_default_store(&store, &err) != DK_OK)
    dk_test_die("dk_default_store", err);
  const char* seal = "world1/elastic/1/members";
  if (dk_store_wait(store, &seal, 1, WAIT_MS, &err) != DK_OK)
    dk_test_die("generation 1 sealed by the replacement's first try", err);
  void* value = NULL;
  size_t size = 0;
  if (dk_store_get(store, seal, &value, &size, &err) != DK_OK)
    dk_test_die("reading the seal", err);
  char list[64], want[96];
  rank_list(survivors, n_survivors, list, sizeof(list));
  snprintf(want, sizeof(want), "failed:%s", list);
  dk_test_check(size == strlen(want) && memcmp(value, want, size) == 0,
                "generation 1 is sealed as failed, naming the survivors");
  dk_free(value);
  int32_t pending = -1;
  if (dk_group_grow_pending(NULL, &pending, &err) != DK_OK)
    dk_test_die("dk_group_grow_pending", err);
  dk_test_check(pending == 0, "no grow pending for a replacement that gave up");
  if (dk_group_barrier(NULL, NULL, &err) != DK_OK)
    dk_test_die("the barrier before the replacement tries again", err);
  if (dk_test_rank == 0 &&
      dk_store_set(store, RETRY_KEY, "1", 1, &err) != DK_OK)
    dk_test_die("letting the replacement try again", err);
  const struct timespec tick = {0, 10 * 1000 * 1000};
  for (int waited = 0; pending != 1 && waited < WAIT_MS; waited += 10) {
    nanosleep(&tick, NULL);
    if (dk_group_grow_pending(NULL, &pending, &err) != DK_OK)
      dk_test_die("dk_group_grow_pending", err);
  }
  dk_test_require(pending == 1,
                  "the replacement's second try waits for the grow");
  dk_store_destroy(store);
}

/* A grow this rank cannot be part of (a world of one, from world rank 1 or
 * more) is refused before anything happens: the default group works on. */
static void refused_grow(void) {
  dk_group_t* none = NULL;
  dk_error_t* err = NULL;
  dk_status_t s = dk_group_grow(NULL, 1, 1000, &none, &err);
  const char* message = err != NULL ? dk_error_message(err) : "";
  dk_test_check(s == DK_INVALID_ARGUMENT,
                "a grow to a world this rank is outside: DK_INVALID_ARGUMENT");
  char want[64];
  snprintf(want, sizeof(want), "' (world rank %d)", dk_test_rank);
  dk_test_check(strstr(message, "grow of group 'world@g") != NULL &&
                    strstr(message, want) != NULL,
                "the refusal names the group and this world rank");
  if (s == DK_INVALID_ARGUMENT) {
    printf("rank %d: refused as expected: %s\n", dk_test_rank, message);
  }
  dk_error_free(err);
  err = NULL;
  dk_test_check(dk_group_async_error(NULL, &err) == DK_OK,
                "a refused grow leaves the group as it was (not aborted)");
  dk_error_free(err);
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const int direct = argc > 1 && strcmp(argv[1], "direct") == 0;
  const int shrunk_steps = direct ? 0 : SHRUNK_STEPS;
  const char* replacement = getenv("DISTKIT_REPLACEMENT");
  const int newcomer = replacement != NULL && *replacement != '\0';
  const int size = atoi(getenv("WORLD_SIZE"));
  dk_test_require(size >= 2 && size <= 8, "the job has 2 to 8 ranks");
  dk_test_rank = atoi(getenv("RANK"));
  dk_test_declare_hosts(dk_test_rank, size);
  int all[8], survivors[8], n_survivors = 0;
  for (int r = 0; r < size; ++r) {
    all[r] = r;
    if (r != VICTIM) survivors[n_survivors++] = r;
  }
  /* The grown world's generation: 2 after the replacement's failed try. */
  const int generation = direct ? 1 : 2;
  char grown_name[16];
  snprintf(grown_name, sizeof(grown_name), "world@g%d", generation);
  /* "direct": the replacement comes a second late, so the survivors' grow
   * (a timeout of 0: the group's) must wait for it. */
  if (newcomer && direct) sleep(1);
  if (newcomer && !direct) first_try_times_out(survivors, n_survivors);
  dk_group_t* world = dk_test_init(NULL, TIMEOUT_MS);
  dk_error_t* err = NULL;
  dk_test_require(dk_group_size(world) == size, "the world has WORLD_SIZE");
  int step = 0;
  dk_group_t* grown = NULL;
  if (newcomer) {
    /* dk_init joined the survivors' grow: its world is the grown group. */
    dk_test_check(strcmp(replacement, "1") == 0, "the job's first replacement");
    dk_test_check(dk_test_rank == VICTIM,
                  "the replacement takes the lost rank");
    dk_test_check(
        strncmp(dk_group_name(world), grown_name, strlen(grown_name)) == 0,
        "the replacement's world is the grow's generation");
    printf("rank %d: replacement %s joined '%s'\n", dk_test_rank, replacement,
           dk_group_name(world));
    grown = world;
    world = NULL;
  } else {
    for (; step < DIE_AT; ++step) {
      if (step_on(NULL, step, all, size, &err) != DK_OK)
        dk_test_die("a step before the failure", err);
    }
    if (dk_test_rank == VICTIM) {
      printf("rank %d: SIGKILL before step %d\n", dk_test_rank, step);
      raise(SIGKILL);
    }
    dk_status_t s = step_on(NULL, step, all, size, &err);
    dk_test_check(s == DK_UNAVAILABLE || s == DK_DEADLINE_EXCEEDED,
                  "the step the rank died in fails: a lost peer or a timeout");
    printf("rank %d: step %d failed (%s); %s\n", dk_test_rank, step,
           err != NULL ? dk_error_message(err) : "no error",
           direct ? "growing from the poisoned world" : "shrinking");
    dk_error_free(err);
    err = NULL;
    dk_group_t* shrunk = NULL;
    if (!direct) {
      if (dk_group_shrink(NULL, 2000, &shrunk, &err) != DK_OK)
        dk_test_die("dk_group_shrink", err);
      dk_test_check(dk_group_size(shrunk) == size - 1, "the survivors' group");
      check_order(shrunk, survivors, n_survivors);
      for (int k = 0; k < SHRUNK_STEPS; ++k, ++step) {
        if (step_on(NULL, step, survivors, n_survivors, &err) != DK_OK)
          dk_test_die("a step at world size - 1", err);
      }
      after_first_try(survivors, n_survivors);
      printf("rank %d: %d steps at %d ranks; growing\n", dk_test_rank,
             SHRUNK_STEPS, n_survivors);
    }
    /* "direct" passes a timeout of 0: the group's (TIMEOUT_MS too), not a
     * deadline already past. */
    if (dk_group_grow(NULL, 0, direct ? 0 : TIMEOUT_MS, &grown, &err) != DK_OK)
      dk_test_die("dk_group_grow", err);
    /* The groups it replaced are aborted: nothing runs on them again. */
    double x = 1;
    int64_t one = 1;
    DLTensor t = dk_test_host_tensor(&x, &one, 1, kDLFloat, 64);
    dk_test_check(
        dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err) != DK_OK,
        "the old world is aborted");
    dk_error_free(err);
    err = NULL;
    if (shrunk != NULL) {
      dk_test_check(
          dk_group_all_reduce(shrunk, &t, DK_OP_SUM, NULL, &err) != DK_OK,
          "the shrunk group is aborted");
      dk_error_free(err);
      err = NULL;
      dk_group_destroy(shrunk);
    }
  }
  /* Both sides: the grown group is the default one, of the original size. */
  dk_test_check(dk_group_size(grown) == size, "grown back to the job's size");
  dk_test_check(dk_group_size(NULL) == size,
                "the grown group is the default one");
  dk_test_check(dk_group_rank(grown) == dk_test_rank, "world ranks kept");
  dk_test_check(
      strncmp(dk_group_name(grown), grown_name, strlen(grown_name)) == 0,
      "the grown group carries the grow's generation");
  check_order(grown, all, size);
  if (dk_test_rank > 0) refused_grow();
  int64_t counter = step, one = 1;
  DLTensor tc = dk_test_host_tensor(&counter, &one, 1, kDLInt, 64);
  if (dk_group_broadcast(grown, &tc, 0, NULL, &err) != DK_OK)
    dk_test_die("broadcast of the step", err);
  dk_test_check(counter == DIE_AT + shrunk_steps,
                "the step counter from rank 0");
  step = (int)counter;
  for (int k = 0; k < GROWN_STEPS; ++k, ++step) {
    if (step_on(NULL, step, all, size, &err) != DK_OK)
      dk_test_die("a step after the grow", err);
  }
  /* Subgroups of the grown world: each its own name and rendezvous (two
   * once took the grown world's own name and met under the same keys). */
  int reversed[8];
  for (int r = 0; r < size; ++r) reversed[r] = size - 1 - r;
  dk_group_t *sub_a = NULL, *sub_b = NULL;
  if (dk_group_new(grown, all, size, &sub_a, &err) != DK_OK)
    dk_test_die("dk_group_new on the grown world", err);
  if (dk_group_new(grown, reversed, size, &sub_b, &err) != DK_OK)
    dk_test_die("a second dk_group_new on the grown world", err);
  dk_test_check(strcmp(dk_group_name(sub_a), dk_group_name(sub_b)) != 0,
                "two subgroups of the grown world are named apart");
  dk_test_check(dk_group_rank(sub_b) == size - 1 - dk_test_rank,
                "the second subgroup numbers the ranks as given");
  if (step_on(sub_a, step, all, size, &err) != DK_OK)
    dk_test_die("a step on the first subgroup", err);
  check_order(sub_b, reversed, size);
  dk_group_destroy(sub_a);
  dk_group_destroy(sub_b);
  if (dk_group_barrier(NULL, NULL, &err) != DK_OK) dk_test_die("barrier", err);
  dk_group_destroy(grown);
  if (world != NULL) dk_group_destroy(world);
  dk_shutdown();
  if (dk_test_failures == 0) {
    printf("rank %d: %s, back at %d ranks, %d steps checked\n", dk_test_rank,
           newcomer ? "joined as a replacement"
           : direct ? "grew from the poisoned world"
                    : "shrank and grew",
           size, step);
  }
  return dk_test_failures == 0 ? 0 : 1;
}
