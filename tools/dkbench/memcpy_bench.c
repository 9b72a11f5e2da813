// memcpy_bench: one core's memcpy bandwidth at the sizes collectives_bench
// runs, measured in the same invocation as the collectives it is compared
// with (the bound: all_reduce busbw against single-core memcpy).
// Both buffers are touched first (no page faults in the timing); time per
// copy is the median over batches of a batch's mean, as collective_bench
// times a call. Prints CSV lines
//   memcpy,copy,1,<bytes>,<microseconds per copy>

#define _POSIX_C_SOURCE 199309L  // clock_gettime under -std=c11

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double NowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int ItersFor(long long bytes) {
  long long iters = 50000000LL / (bytes > 0 ? bytes : 1);
  if (iters < 5) iters = 5;
  if (iters > 200) iters = 200;
  return (int)iters;
}

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  long long min_bytes = 4, max_bytes = 64LL << 20;
  int batches = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--min-bytes") == 0) min_bytes = atoll(argv[i + 1]);
    if (strcmp(argv[i], "--max-bytes") == 0) max_bytes = atoll(argv[i + 1]);
    if (strcmp(argv[i], "--batches") == 0) batches = atoi(argv[i + 1]);
  }
  if (batches < 1 || batches > 1000 || min_bytes < 1 || max_bytes < min_bytes) {
    fprintf(stderr, "memcpy_bench: bad arguments\n");
    return 2;
  }
  char* src = malloc(max_bytes);
  char* dst = malloc(max_bytes);
  double* per_copy = malloc(sizeof(double) * batches);
  if (src == NULL || dst == NULL || per_copy == NULL) {
    fprintf(stderr, "memcpy_bench: cannot allocate 2 x %lld bytes\n",
            max_bytes);
    return 1;
  }
  memset(src, 1, max_bytes);
  memset(dst, 0, max_bytes);
  for (long long bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const int iters = ItersFor(bytes);
    for (int w = 0; w < 3; ++w) memcpy(dst, src, bytes);
    for (int b = 0; b < batches; ++b) {
      const double t0 = NowUs();
      for (int i = 0; i < iters; ++i) {
        memcpy(dst, src, bytes);
        // Keeps the compiler from merging or dropping the copies.
        __asm__ __volatile__("" : : "r"(dst) : "memory");
      }
      per_copy[b] = (NowUs() - t0) / iters;
    }
    qsort(per_copy, batches, sizeof(double), CompareDoubles);
    printf("memcpy,copy,1,%lld,%.3f\n", bytes, per_copy[batches / 2]);
    fflush(stdout);
  }
  free(per_copy);
  free(dst);
  free(src);
  return 0;
}
