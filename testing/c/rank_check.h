/* How a C multi-rank test program reports, as testing/cc/rank_check.h does
 * for C++ ones: a failed dk_test_check prints "rank R: CHECK FAILED: what" on
 * stderr and is counted, so one run shows every failure; dk_test_require and
 * dk_test_die stop the rank at once where later steps depend on the result.
 * R is dk_test_rank, which dk_test_init sets. A program includes this header
 * from one source file: the state below is that program's. */
#ifndef DISTKIT_TESTING_C_RANK_CHECK_H_
#define DISTKIT_TESTING_C_RANK_CHECK_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "distkit/distkit.h"

/* The rank named in messages (-1 until known) and the failed checks. */
static int dk_test_rank = -1;
static int dk_test_failures;

static inline void dk_test_check(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "rank %d: CHECK FAILED: %s\n", dk_test_rank, what);
    ++dk_test_failures;
  }
}

/* Ends the rank: `what` failed, with `err`'s message when there is one. */
static inline void dk_test_die(const char* what, dk_error_t* err) {
  fprintf(stderr, "rank %d: FAILED: %s%s%s\n", dk_test_rank, what,
          err != NULL ? ": " : "", err != NULL ? dk_error_message(err) : "");
  exit(1);
}

/* Like dk_test_check, but ends the rank when `ok` is false. */
static inline void dk_test_require(int ok, const char* what) {
  if (!ok) {
    dk_test_check(ok, what);
    exit(1);
  }
}

/* `call` (which passes &e_ for its error) must succeed, else the rank ends
 * naming it. */
#define DK_TEST_OK(call)                         \
  do {                                           \
    dk_error_t* e_ = NULL;                       \
    if ((call) != DK_OK) dk_test_die(#call, e_); \
  } while (0)

/* Joins the job from torchrun's variables after checking that the library
 * fits this header: on `backend` (NULL: the default) with operations bounded
 * by `timeout_ms` (0: the default). Sets dk_test_rank to the world rank and
 * returns the world; ends the rank when either call fails. */
static inline dk_group_t* dk_test_init(const char* backend,
                                       int64_t timeout_ms) {
  dk_init_config_t config;
  dk_init_config_init(&config);
  if (backend != NULL) config.backend = backend;
  if (timeout_ms > 0) config.timeout_ms = timeout_ms;
  dk_error_t* err = NULL;
  if (dk_init_version(DK_ABI_MAJOR, DK_ABI_MINOR, &err) != DK_OK)
    dk_test_die("dk_init_version", err);
  dk_group_t* world = NULL;
  if (dk_init("pytorch", &config, &world, &err) != DK_OK)
    dk_test_die("dk_init", err);
  dk_test_rank = dk_group_rank(world);
  return world;
}

#endif /* DISTKIT_TESTING_C_RANK_CHECK_H_ */
