/* OpenMPI side of dkbench; same sizes and timing rules as collective_bench.cc.
 * Run with mpirun. Rank 0 prints
 *   openmpi,<op>,<world_size>,<bytes>,<microseconds per call>
 * --touch 1: each call also writes its input before and reads its output
 * after (touch.h). --ops as collective_bench.cc's (all nine; barrier is
 * printed with 0 bytes). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/dkbench/touch.h"

static int iters_for(long long bytes) {
  long long it = 50000000LL / (bytes > 0 ? bytes : 1);
  return it < 5 ? 5 : (it > 200 ? 200 : (int)it);
}

/* Whether the comma-separated `ops` names `op` (not as part of another). */
static int has_op(const char* ops, const char* op) {
  size_t n = strlen(op);
  for (const char* p = ops; (p = strstr(p, op)) != NULL; p += n) {
    if ((p == ops || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) return 1;
  }
  return 0;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long long min_bytes = 4, max_bytes = 64LL << 20;
  int batches = 5, touch = 0;
  const char* ops = "all_reduce,all_gather,reduce_scatter,broadcast";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--min-bytes")) min_bytes = atoll(argv[i + 1]);
    if (!strcmp(argv[i], "--max-bytes")) max_bytes = atoll(argv[i + 1]);
    if (!strcmp(argv[i], "--batches")) batches = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--ops")) ops = argv[i + 1];
    if (!strcmp(argv[i], "--touch")) touch = !strcmp(argv[i + 1], "1");
  }
  enum { kOps = 9 };
  const char* names[kOps] = {"all_reduce", "all_gather", "reduce_scatter",
                             "broadcast",  "gather",     "scatter",
                             "reduce",     "all_to_all", "barrier"};
  /* Every name in --ops must be one of these. */
  for (const char* p = ops; *p != '\0';) {
    size_t len = strcspn(p, ",");
    int known = 0;
    for (int o = 0; o < kOps; ++o) {
      known |= strlen(names[o]) == len && !strncmp(p, names[o], len);
    }
    if (!known) {
      if (rank == 0) fprintf(stderr, "--ops: unknown op '%.*s'\n", (int)len, p);
      MPI_Finalize();
      return 2;
    }
    p += len + (p[len] == ',');
  }
  for (int o = 0; o < kOps; ++o) {
    if (!has_op(ops, names[o])) continue;
    const int barrier = o == 8;
    for (long long bytes = barrier ? 0 : min_bytes;
         barrier ? bytes == 0 : bytes <= max_bytes;
         bytes = barrier ? 1 : bytes * 4) {
      long long count = bytes / 4 > 0 ? bytes / 4 : 1;
      long long part = count / n > 0 ? count / n : 1;
      /* Input a, output b: as in collective_bench.cc. */
      const int gathers = o == 1 || o == 4, scatters = o == 2 || o == 5;
      const int all_to_all = o == 7;
      long long alen =
          scatters || all_to_all ? part * n : (gathers ? part : count);
      long long blen = gathers || all_to_all ? part * n : part;
      float* a = malloc(sizeof(float) * alen);
      float* b = malloc(sizeof(float) * blen);
      for (long long i = 0; i < alen; ++i) a[i] = 1.0f;
      /* The buffer the call leaves its result in (touch.h). */
      float* result = gathers || scatters || all_to_all ? b : a;
      long long result_len = gathers || scatters || all_to_all ? blen : count;
      volatile uint32_t sink = 0;
      int iters = iters_for(bytes);
      double* per_call = malloc(sizeof(double) * batches);
      for (int it = -3; it < batches * iters; ++it) {
        if (it >= 0 && it % iters == 0) {
          MPI_Barrier(MPI_COMM_WORLD);
          per_call[it / iters] = MPI_Wtime();
        }
        if (touch) TouchWrite(a, sizeof(float) * alen, 0x3f800000u);
        switch (o) {
          case 0:
            MPI_Allreduce(MPI_IN_PLACE, a, (int)count, MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
            break;
          case 1:
            MPI_Allgather(a, (int)part, MPI_FLOAT, b, (int)part, MPI_FLOAT,
                          MPI_COMM_WORLD);
            break;
          case 2:
            MPI_Reduce_scatter_block(a, b, (int)part, MPI_FLOAT, MPI_SUM,
                                     MPI_COMM_WORLD);
            break;
          case 3:
            MPI_Bcast(a, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
            break;
          case 4:
            MPI_Gather(a, (int)part, MPI_FLOAT, b, (int)part, MPI_FLOAT, 0,
                       MPI_COMM_WORLD);
            break;
          case 5:
            MPI_Scatter(a, (int)part, MPI_FLOAT, b, (int)part, MPI_FLOAT, 0,
                        MPI_COMM_WORLD);
            break;
          case 6:
            /* In place at the root, as distkit's Reduce. */
            MPI_Reduce(rank == 0 ? MPI_IN_PLACE : a, a, (int)count, MPI_FLOAT,
                       MPI_SUM, 0, MPI_COMM_WORLD);
            break;
          case 7:
            MPI_Alltoall(a, (int)part, MPI_FLOAT, b, (int)part, MPI_FLOAT,
                         MPI_COMM_WORLD);
            break;
          case 8:
            MPI_Barrier(MPI_COMM_WORLD);
            break;
        }
        if (touch) sink += TouchRead(result, sizeof(float) * result_len);
        if (it >= 0 && it % iters == iters - 1) {
          per_call[it / iters] =
              (MPI_Wtime() - per_call[it / iters]) * 1e6 / iters;
        }
      }
      qsort(per_call, batches, sizeof(double), cmp);
      double median = per_call[batches / 2], worst = 0;
      MPI_Reduce(&median, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        printf("openmpi,%s,%d,%lld,%.3f\n", names[o], n, bytes, worst);
        fflush(stdout);
      }
      free(a);
      free(b);
      free(per_call);
    }
  }
  MPI_Finalize();
  return 0;
}
