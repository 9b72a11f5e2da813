/* dk_group_name and dk_group_backend return static strings: kept by a
 * caller across dk_shutdown and the destroy of every handle, they still
 * read as they did. They used to be the group's own strings, freed with the
 * default group at shutdown (a use after free, which ASan reports; here the
 * heap is refilled after the frees, so that the old bytes are overwritten
 * in a plain build too). Then a second world: the same texts again. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distkit/distkit.h"
#include "testing/c/lone_rank.h"

static int failures;

static void check(int ok, const char* what) {
  if (!ok) {
    printf("CHECK FAILED: %s\n", what);
    ++failures;
  }
}

/* Checks that `kept` (a pointer kept from before) still reads `want`. */
static void check_text(const char* kept, const char* want, const char* what) {
  if (kept == NULL || strcmp(kept, want) != 0) {
    printf("CHECK FAILED: %s reads \"%.32s\", not \"%s\"\n", what,
           kept == NULL ? "(null)" : kept, want);
    ++failures;
  }
}

/* Allocates and fills blocks of every small size, so that memory freed just
 * before is handed out again and overwritten; frees them after `check`. */
enum { kSizes = 1024, kPerSize = 4 };
static void* blocks[kSizes][kPerSize];
static void refill_heap(void) {
  for (int s = 0; s < kSizes; ++s) {
    for (int k = 0; k < kPerSize; ++k) {
      blocks[s][k] = malloc((size_t)(s + 1) * 16);
      if (blocks[s][k] != NULL) memset(blocks[s][k], 'Z', (size_t)(s + 1) * 16);
    }
  }
}
static void free_heap(void) {
  for (int s = 0; s < kSizes; ++s) {
    for (int k = 0; k < kPerSize; ++k) free(blocks[s][k]);
  }
}

int main(void) {
  dk_store_t* store = dk_lone_rank_store();
  dk_group_t* world = dk_lone_rank_join(store);
  dk_group_t* sub = dk_lone_rank_subgroup(world);
  const char* name = dk_group_name(NULL);
  const char* backend = dk_group_backend(NULL);
  const char* sub_name = dk_group_name(sub);
  const char* sub_backend = dk_group_backend(sub);
  check_text(name, "world", "dk_group_name(NULL)");
  check_text(backend, "gloo", "dk_group_backend(NULL)");
  if (sub_name == NULL || strncmp(sub_name, "world/", 6) != 0) {
    printf("CHECK FAILED: the subgroup's name is %s\n",
           sub_name == NULL ? "NULL" : sub_name);
    return 1;
  }
  char* sub_want = strdup(sub_name);

  dk_group_destroy(sub);
  dk_shutdown();
  dk_group_destroy(world); /* the last holder of the world: freed here */
  check(dk_group_name(NULL) == NULL, "no default group after shutdown");
  check(dk_group_name(sub) == NULL, "a destroyed handle's name is NULL");
  refill_heap();
  check_text(name, "world", "dk_group_name(NULL) kept across shutdown");
  check_text(backend, "gloo", "dk_group_backend(NULL) kept across shutdown");
  check_text(sub_name, sub_want, "a subgroup's name kept across destroy");
  check_text(sub_backend, "gloo", "a subgroup's backend kept across destroy");
  free_heap();

  /* A second world has the same texts, and the first ones still read. */
  world = dk_lone_rank_join(store);
  check_text(dk_group_name(NULL), "world", "the second world's name");
  check_text(dk_group_backend(world), "gloo", "the second world's backend");
  dk_shutdown();
  dk_group_destroy(world);
  check_text(name, "world", "the first world's name after the second's");
  free(sub_want);
  dk_store_destroy(store);
  printf("group name lifetime: %s\n", failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
