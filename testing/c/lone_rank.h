/* A job of one process on a store of its own, for the C tests that need no
 * launcher (a single rank racing its own threads, or outliving its groups):
 * a store served on a free loopback port, the world joined on it as rank 0
 * of 1, and a subgroup of that rank. Each call prints what failed on stdout
 * ("store: ...", "init: ...", "new_group: ...") and ends the process with 1,
 * as the tests did before they shared it. */
#ifndef DISTKIT_TESTING_C_LONE_RANK_H_
#define DISTKIT_TESTING_C_LONE_RANK_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "distkit/distkit.h"

static inline void dk_lone_rank_die(const char* what, dk_error_t* err) {
  printf("%s: %s\n", what, dk_error_message(err));
  exit(1);
}

/* A store on 127.0.0.1 at a port the system picks. */
static inline dk_store_t* dk_lone_rank_store(void) {
  dk_store_config_t config;
  dk_store_config_init_sized(&config, sizeof config);
  config.address = "127.0.0.1:0";
  dk_store_t* store = NULL;
  dk_error_t* err = NULL;
  if (dk_store_serve(&config, &store, &err) != DK_OK)
    dk_lone_rank_die("store", err);
  return store;
}

/* The default group on `store`: rank 0 of 1. */
static inline dk_group_t* dk_lone_rank_join(dk_store_t* store) {
  dk_group_t* world = NULL;
  dk_error_t* err = NULL;
  if (dk_init_with_store(store, 0, 1, NULL, &world, &err) != DK_OK)
    dk_lone_rank_die("init", err);
  return world;
}

/* A new group of `world`'s rank 0 alone (named "world/<n>"). */
static inline dk_group_t* dk_lone_rank_subgroup(dk_group_t* world) {
  const int32_t ranks[] = {0};
  dk_group_t* sub = NULL;
  dk_error_t* err = NULL;
  if (dk_group_new(world, ranks, 1, &sub, &err) != DK_OK)
    dk_lone_rank_die("new_group", err);
  return sub;
}

#endif /* DISTKIT_TESTING_C_LONE_RANK_H_ */
