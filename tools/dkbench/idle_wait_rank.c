/* How much CPU a rank burns while it waits inside a collective for a late
 * peer (run under distrun, 2+ ranks, one host: the shared-memory path). The
 * last rank sleeps --late seconds (default 2) before its all_reduce; every
 * other rank measures its own CPU time (all threads: getrusage) across the
 * all_reduce and prints the share of one core it used while waiting.
 *
 *   bazel-bin/tools/distrun/distrun --nproc-per-node 2 -- \
 *     bazel-bin/tools/dkbench/idle_wait_rank 2
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"

static double CpuSeconds(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static double WallSeconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  const double late = argc > 1 ? atof(argv[1]) : 2.0;
  dk_init_config_t cfg;
  dk_init_config_init(&cfg);
  cfg.timeout_ms = 60000;
  dk_group_t* world = NULL;
  dk_error_t* err = NULL;
  if (dk_init("pytorch", &cfg, &world, &err) != DK_OK) {
    fprintf(stderr, "init failed: %s\n", dk_error_message(err));
    return 3;
  }
  const int rank = dk_group_rank(world), size = dk_group_size(world);
  float x = 1.0f;
  int64_t n = 1;
  DLTensor t = dk_test_float_vector(&x, &n);
  /* Everyone starts the measured all_reduce together, but the last rank. */
  if (dk_group_barrier(world, NULL, &err) != DK_OK) {
    fprintf(stderr, "barrier failed: %s\n", dk_error_message(err));
    return 3;
  }
  if (rank == size - 1) {
    struct timespec nap = {(time_t)late, (long)((late - (time_t)late) * 1e9)};
    nanosleep(&nap, NULL);
  }
  const double cpu0 = CpuSeconds(), wall0 = WallSeconds();
  if (dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err) != DK_OK) {
    fprintf(stderr, "all_reduce failed: %s\n", dk_error_message(err));
    return 3;
  }
  const double cpu = CpuSeconds() - cpu0, wall = WallSeconds() - wall0;
  if (x != (float)size) {
    fprintf(stderr, "wrong sum %f\n", x);
    return 4;
  }
  if (rank != size - 1) {
    printf(
        "rank %d waited %.3f s in all_reduce using %.3f s of CPU: %.1f%% "
        "of a core\n",
        rank, wall, cpu, 100.0 * cpu / wall);
  }
  dk_group_destroy(world);
  dk_shutdown();
  return 0;
}
