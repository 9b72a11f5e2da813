/* Convention 13 (any thread): a thread asking dk_group_rank / dk_group_size /
 * dk_group_backend / dk_group_comm_device of the default group (NULL) while
 * another thread initializes and shuts the job down, 300 times. Those calls
 * read the default group after checking that there is one; a shutdown in
 * between freed it under them (a crash within a few iterations). Every answer
 * must be a single rank's (rank 0 of 1), and nothing may crash.
 * The same for dk_parallel_state_rank / _size of a state whose data-parallel
 * group is the world (NULL): it answers rank 0 of 1 while initialized and -1
 * after the shutdown, never anything else; it too asked for the world after
 * checking that there was one (a null group's rank: a crash). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "distkit/distkit.h"
#include "testing/c/lone_rank.h"

static atomic_int stop;
static long calls, odd, odd_state;
static dk_parallel_state_t* state; /* data-parallel group: the world */

static void* ask(void* unused) {
  (void)unused;
  while (!atomic_load(&stop)) {
    const int32_t rank = dk_group_rank(NULL), size = dk_group_size(NULL);
    (void)dk_group_backend(NULL);
    if (rank != 0 || size != 1) ++odd;
    const int32_t state_rank = dk_parallel_state_rank(state, DK_PARALLEL_DATA);
    const int32_t state_size = dk_parallel_state_size(state, DK_PARALLEL_DATA);
    if ((state_rank != 0 && state_rank != -1) ||
        (state_size != 1 && state_size != -1)) {
      ++odd_state;
    }
    ++calls;
  }
  return NULL;
}

int main(void) {
  dk_store_t* store = dk_lone_rank_store();
  dk_error_t* err = NULL;
  if (dk_parallel_state_create(NULL, DK_GROUP_UNUSED, DK_GROUP_UNUSED, &state,
                               &err) != DK_OK) {
    printf("parallel state: %s\n", dk_error_message(err));
    return 1;
  }
  pthread_t asker;
  pthread_create(&asker, NULL, ask, NULL);
  int failures = 0;
  for (int i = 0; i < 300 && failures == 0; ++i) {
    dk_group_t* world = NULL;
    if (dk_init_with_store(store, 0, 1, NULL, &world, &err) != DK_OK) {
      printf("init %d: %s\n", i, dk_error_message(err));
      dk_error_free(err);
      err = NULL;
      ++failures;
      continue;
    }
    dk_shutdown(); /* the handle stays the caller's */
    dk_group_destroy(world);
  }
  atomic_store(&stop, 1);
  pthread_join(asker, NULL);
  dk_parallel_state_destroy(state);
  dk_store_destroy(store);
  if (odd != 0) {
    printf("CHECK FAILED: %ld of %ld answers were not rank 0 of 1\n", odd,
           calls);
    ++failures;
  }
  if (odd_state != 0) {
    printf(
        "CHECK FAILED: %ld of %ld parallel-state answers were neither rank "
        "0 of 1 nor -1\n",
        odd_state, calls);
    ++failures;
  }
  printf("shutdown race: %ld calls beside 300 init/shutdown rounds, %s\n",
         calls, failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
