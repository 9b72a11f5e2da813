/* Convention 13 for a parallel state: two threads ask rank, size and
 * describe of a dk_parallel_state_t while the main thread destroys it, 2000
 * states in turn. The state's data- and expert-parallel groups are unused
 * and its tensor-parallel group a subgroup, so every answer must be the
 * state's own or a destroyed state's (-1, DK_FAILED_PRECONDITION). Destroy
 * used to reset the state's groups in place while the readers used them: a
 * reader then answered from a state half reset, whose data-parallel group
 * had become the world (rank 0, size 1, "group: None"). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "distkit/distkit.h"
#include "testing/c/lone_rank.h"

enum { kStates = 2000, kReaders = 2 };

static const char kText[] =
    "data_parallel_group: group: -1, initialized: False, world size: -1, "
    "tensor_parallel_group: group: world/1, initialized: True, world size: "
    "1, expert_model_parallel_group: group: -1, initialized: False, world "
    "size: -1";

static _Atomic(dk_parallel_state_t*) current;
static atomic_int stop;
static atomic_long calls, wrong;

static void report(const char* what, long got) {
  if (atomic_fetch_add(&wrong, 1) < 5) {
    printf("CHECK FAILED: %s: %ld\n", what, got);
  }
}

static void* ask(void* unused) {
  (void)unused;
  while (!atomic_load(&stop)) {
    dk_parallel_state_t* state = atomic_load(&current);
    if (state == NULL) continue;
    /* Unused groups: -1 before and after destroy. */
    int32_t v = dk_parallel_state_rank(state, DK_PARALLEL_DATA);
    if (v != -1) report("data-parallel rank", v);
    v = dk_parallel_state_size(state, DK_PARALLEL_EXPERT);
    if (v != -1) report("expert-parallel size", v);
    v = dk_parallel_state_size(state, DK_PARALLEL_DATA);
    if (v != -1) report("data-parallel size", v);
    /* The subgroup: rank 0 of 1, or -1 once destroyed. */
    v = dk_parallel_state_size(state, DK_PARALLEL_TENSOR);
    if (v != 1 && v != -1) report("tensor-parallel size", v);
    char* text = NULL;
    dk_error_t* err = NULL;
    const dk_status_t status = dk_parallel_state_describe(state, &text, &err);
    if (status == DK_OK) {
      if (strcmp(text, kText) != 0) {
        if (atomic_fetch_add(&wrong, 1) < 5) printf("describe: %s\n", text);
      }
    } else if (status != DK_FAILED_PRECONDITION) {
      report("describe's status", status);
    }
    dk_free(text);
    dk_error_free(err);
    atomic_fetch_add(&calls, 1);
  }
  return NULL;
}

int main(void) {
  dk_store_t* store = dk_lone_rank_store();
  dk_group_t* world = dk_lone_rank_join(store);
  dk_group_t* sub = dk_lone_rank_subgroup(world);
  dk_error_t* err = NULL;
  pthread_t readers[kReaders];
  for (int i = 0; i < kReaders; ++i) {
    pthread_create(&readers[i], NULL, ask, NULL);
  }
  int failures = 0;
  for (int i = 0; i < kStates && failures == 0; ++i) {
    dk_parallel_state_t* state = NULL;
    if (dk_parallel_state_create(DK_GROUP_UNUSED, sub, DK_GROUP_UNUSED, &state,
                                 &err) != DK_OK) {
      printf("create %d: %s\n", i, dk_error_message(err));
      ++failures;
      break;
    }
    atomic_store(&current, state);
    /* Let the readers reach the state, then destroy it under them. The
     * handle stays reserved (convention 11): they may go on using it. */
    const long seen = atomic_load(&calls);
    while (atomic_load(&calls) < seen + kReaders) {
    }
    dk_parallel_state_destroy(state);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < kReaders; ++i) pthread_join(readers[i], NULL);
  if (atomic_load(&wrong) != 0) {
    printf("CHECK FAILED: %ld of %ld answers were not the state's own\n",
           atomic_load(&wrong), atomic_load(&calls));
    ++failures;
  }
  dk_group_destroy(sub);
  dk_shutdown();
  dk_group_destroy(world);
  dk_store_destroy(store);
  printf("parallel state race: %ld calls beside %d destroys, %s\n",
         atomic_load(&calls), kStates, failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
