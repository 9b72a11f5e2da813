/* One rank of tools/dkbench/startup_bench.py, distkit's side: joins the job
 * (dk_init("pytorch"): RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; rank 0
 * hosts the store), all-reduces one float, checks it, and prints the wall
 * clock (CLOCK_REALTIME, ns) at which that first all_reduce ended. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "distkit/distkit.h"

int main(void) {
  dk_init_config_t cfg;
  dk_init_config_init(&cfg);
  cfg.timeout_ms = 600000;
  dk_group_t* world = NULL;
  dk_error_t* err = NULL;
  if (dk_init("pytorch", &cfg, &world, &err) != DK_OK) {
    fprintf(stderr, "init failed: %s\n", dk_error_message(err));
    return 3;
  }
  float x = 1.0f;
  int64_t n = 1;
  DLTensor t;
  memset(&t, 0, sizeof(t));
  t.data = &x;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = &n;
  if (dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err) != DK_OK) {
    fprintf(stderr, "all_reduce failed: %s\n", dk_error_message(err));
    return 3;
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (x != (float)dk_group_size(world)) {
    fprintf(stderr, "wrong sum %f\n", x);
    return 4;
  }
  printf("first_all_reduce_end_ns=%lld\n",
         (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
  dk_group_destroy(world);
  dk_shutdown();
  return 0;
}
