/* A plain-C rank for the harness self-test: every rank drops a file named
 * after its rank into a directory all ranks share, then waits until
 * WORLD_SIZE files exist. Proves the harness runs WORLD_SIZE real processes
 * with distinct RANKs. */
#define _DEFAULT_SOURCE /* usleep under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
  const char* rank_s = getenv("RANK");
  const char* world_s = getenv("WORLD_SIZE");
  const char* dir = getenv("TEST_TMPDIR");
  if (rank_s == NULL || world_s == NULL || dir == NULL) {
    fprintf(stderr, "RANK, WORLD_SIZE and TEST_TMPDIR must be set\n");
    return 1;
  }
  int rank = atoi(rank_s), world = atoi(world_s);
  char path[4096];
  snprintf(path, sizeof(path), "%s/c_rank_%d", dir, rank);
  FILE* f = fopen(path, "w");
  if (f == NULL) return 1;
  fclose(f);
  for (int tries = 0; tries < 600; ++tries) {
    int present = 0;
    for (int r = 0; r < world; ++r) {
      snprintf(path, sizeof(path), "%s/c_rank_%d", dir, r);
      if (access(path, F_OK) == 0) ++present;
    }
    if (present == world) {
      printf("c rank %d of %d saw all %d ranks\n", rank, world, world);
      return 0;
    }
    usleep(50 * 1000);
  }
  fprintf(stderr, "c rank %d: timed out waiting for the other ranks\n", rank);
  return 1;
}
