/* A rank for fault injection (tools/faultinject/fault_inject.py): joins the
 * job through dk_init (launcher and backend from FAULT_LAUNCHER and
 * FAULT_BACKEND: "pytorch" and gloo by default, "mpi" and mpi under mpirun)
 * and runs FAULT_STEPS all_reduces (every
 * third one 256 KiB, the others 4 B), checking each sum. It prints its pid
 * first, so the injector can kill, stop or zombify it at any moment, in
 * init or mid-collective. Exit 0: every step done; 3: an error (printed);
 * anything else is a crash.
 *
 * FAULT_ZOMBIE=1 runs the rank in a child whose parent never reaps it, so
 * killing the child leaves a zombie (as a supervisor that does not wait()
 * would). FAULT_FREEZE_RANK=r: the rank whose launcher variable (RANK or
 * OMPI_COMM_WORLD_RANK) is r stops itself (SIGSTOP) before dk_init;
 * FAULT_EXIT_RANK=r: that rank exits (0, silently) before dk_init, a rank
 * that dies during rendezvous. FAULT_GO_FILE=path: wait (up to 120 s) until
 * that file exists before dk_init, so that ranks a test spawned at different
 * moments start init together and init's bound (FAULT_CONNECT_TIMEOUT_MS,
 * by default FAULT_TIMEOUT_MS, the op timeout) measures init, not the
 * spawning.
 *
 * FAULT_PREFAULT=1 reads every page of the rank's code and files into its
 * memory before it joins (testing/c/prefault.h): tests that time how soon
 * an error is reported set it, so what they time is the library, not a
 * disk that a build beside it keeps busy.
 * On a failure the rank also says when the failed step began and failed,
 * and how many major faults (reads from disk) it took since it joined. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise, struct rusage's fault counts */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/prefault.h"

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v != NULL && *v ? atoi(v) : fallback;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (env_int("FAULT_ZOMBIE", 0) && fork() > 0) {
    for (;;) pause(); /* never reaps the rank */
  }
  printf("pid=%d\n", (int)getpid());
  const char* my_rank = getenv("OMPI_COMM_WORLD_RANK");
  if (my_rank == NULL) my_rank = getenv("RANK");
  if (my_rank != NULL && env_int("FAULT_FREEZE_RANK", -1) == atoi(my_rank)) {
    raise(SIGSTOP); /* frozen before init, never resumed */
  }
  if (my_rank != NULL && env_int("FAULT_EXIT_RANK", -1) == atoi(my_rank)) {
    _exit(0); /* gone before it joins */
  }
  /* Before the go file: init's bound, not the op timeout, absorbs it. */
  if (env_int("FAULT_PREFAULT", 0)) dk_test_prefault_files();
  const char* go = getenv("FAULT_GO_FILE");
  if (go != NULL && *go) {
    int waited_ms = 0;
    while (access(go, F_OK) != 0) {
      if (waited_ms >= 120000) {
        fprintf(stderr, "init failed: %s never appeared\n", go);
        return 3;
      }
      const struct timespec tick = {0, 10 * 1000 * 1000};
      nanosleep(&tick, NULL);
      waited_ms += 10;
    }
  }
  dk_init_config_t cfg;
  dk_init_config_init(&cfg);
  cfg.timeout_ms = env_int("FAULT_TIMEOUT_MS", 3000);
  cfg.connect_timeout_ms = env_int("FAULT_CONNECT_TIMEOUT_MS", 0);
  const char* launcher = getenv("FAULT_LAUNCHER");
  const char* backend = getenv("FAULT_BACKEND");
  if (backend != NULL && *backend) cfg.backend = backend;
  dk_group_t* world = NULL;
  dk_error_t* err = NULL;
  if (dk_init(launcher != NULL && *launcher ? launcher : "pytorch", &cfg,
              &world, &err) != DK_OK) {
    fprintf(stderr, "init failed: %s\n", dk_error_message(err));
    return 3;
  }
  const int rank = dk_group_rank(world), size = dk_group_size(world);
  struct rusage at_join;
  getrusage(RUSAGE_SELF, &at_join);
  printf("joined rank=%d size=%d\n", rank, size);
  enum { kBig = 65536 };
  static float data[kBig];
  const int steps = env_int("FAULT_STEPS", 3000);
  for (int step = 0; step < steps; ++step) {
    const int64_t n = step % 3 == 0 ? kBig : 1;
    for (int64_t i = 0; i < n; ++i) data[i] = (float)(rank + step % 7);
    DLTensor t = dk_test_float_vector(data, (int64_t*)&n);
    struct timespec began;
    clock_gettime(CLOCK_REALTIME, &began);
    if (dk_group_all_reduce(world, &t, DK_OP_SUM, NULL, &err) != DK_OK) {
      struct timespec ended;
      clock_gettime(CLOCK_REALTIME, &ended);
      struct rusage usage;
      getrusage(RUSAGE_SELF, &usage);
      fprintf(stderr, "rank %d step %d failed: %s\n", rank, step,
              dk_error_message(err));
      /* When the step began and failed by the rank's own clock: a report
       * the test stamps later than `ended` was held up on its way out. */
      fprintf(stderr,
              "rank %d step %d began at %lld.%09ld, failed at %lld.%09ld; %ld "
              "major faults since it joined\n",
              rank, step, (long long)began.tv_sec, began.tv_nsec,
              (long long)ended.tv_sec, ended.tv_nsec,
              usage.ru_majflt - at_join.ru_majflt);
      return 3;
    }
    const float want = (float)size * (size - 1) / 2 + (float)size * (step % 7);
    if (data[0] != want || data[n - 1] != want) {
      fprintf(stderr, "rank %d step %d: wrong sum %f (want %f)\n", rank, step,
              data[0], want);
      return 4;
    }
  }
  printf("rank %d done\n", rank);
  dk_group_destroy(world);
  dk_shutdown();
  return 0;
}
