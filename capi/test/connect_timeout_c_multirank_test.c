/* Joining and collectives have their own bounds (connect_timeout_ms, ABI
 * 0.9): every rank's op timeout is 3 s and its connect timeout 30 s. The
 * last rank starts init 6 s after the others, so init must wait past the
 * op timeout and still join; an all_reduce then checks the connections.
 * Before the next all_reduce the last rank sleeps 8 s: the others must end
 * it with DK_DEADLINE_EXCEEDED, which they can only get from the 3 s op
 * timeout (the 30 s one would have seen the late rank arrive). The margins
 * are seconds, so a loaded machine's stalls cannot decide the outcome. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

static void sleep_ms(long ms) {
  const struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* rank_env = getenv("RANK");
  const char* size_env = getenv("WORLD_SIZE");
  if (rank_env == NULL || size_env == NULL) {
    fprintf(stderr,
            "RANK and WORLD_SIZE must be set (the harness sets them)\n");
    return 1;
  }
  const int late = atoi(size_env) - 1;
  dk_test_rank = atoi(rank_env);
  if (dk_test_rank == late) sleep_ms(6000);

  dk_init_config_t cfg;
  dk_init_config_init(&cfg);
  dk_test_check(cfg.connect_timeout_ms <= 0,
                "connect_timeout_ms defaults to timeout_ms");
  cfg.timeout_ms = 3000;
  cfg.connect_timeout_ms = 30000;
  dk_group_t* world = NULL;
  dk_error_t* err = NULL;
  const double init_start = now_s();
  if (dk_init("pytorch", &cfg, &world, &err) != DK_OK) {
    fprintf(stderr, "rank %d: dk_init failed after %.1f s: %s\n", dk_test_rank,
            now_s() - init_start, dk_error_message(err));
    return 1;
  }
  const int size = dk_group_size(world);
  dk_test_check(dk_group_rank(world) == dk_test_rank, "the world rank is RANK");
  if (dk_test_rank != late) {
    printf("rank %d joined after %.1f s (op timeout 3 s)\n", dk_test_rank,
           now_s() - init_start);
  }

  float x = (float)(dk_test_rank + 1);
  int64_t n = 1;
  DLTensor t = dk_test_float_vector(&x, &n);
  if (dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err) != DK_OK) {
    fprintf(stderr, "rank %d: all_reduce: %s\n", dk_test_rank,
            dk_error_message(err));
    return 1;
  }
  dk_test_check(x == (float)(size * (size + 1) / 2), "the sum of rank + 1");

  if (dk_test_rank == late) sleep_ms(8000);
  x = 1.0f;
  const double op_start = now_s();
  const dk_status_t s = dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err);
  if (dk_test_rank != late) {
    if (s != DK_DEADLINE_EXCEEDED) {
      fprintf(stderr, "rank %d: the late all_reduce gave %d (%s), not %d\n",
              dk_test_rank, (int)s, s == DK_OK ? "" : dk_error_message(err),
              (int)DK_DEADLINE_EXCEEDED);
      ++dk_test_failures;
    } else {
      printf("rank %d: DEADLINE_EXCEEDED after %.1f s: %s\n", dk_test_rank,
             now_s() - op_start, dk_error_message(err));
    }
  }
  if (s != DK_OK) dk_error_free(err);

  dk_group_destroy(world);
  dk_shutdown();
  if (dk_test_failures == 0) printf("rank %d: PASSED\n", dk_test_rank);
  return dk_test_failures == 0 ? 0 : 1;
}
