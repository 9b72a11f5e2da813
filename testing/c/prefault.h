/* Maps in every page of this process's file-backed mappings (its code, its
 * libraries), for the test ranks that time how soon an error is reported.
 * These machines drop page cache left unused for minutes, and a rank's
 * first run through its error path (Gloo's, the store's, libc's
 * formatting) then reads that code back from a disk that the builds and
 * tests beside it keep busy: seconds, once 20 s, in which the rank cannot
 * report anything (three runs of one fault test stalled alike at once).
 * Done before a rank joins, so what a test times is the library.
 * (mlockall would keep the pages too, but needs a memory-lock limit a test
 * sandbox does not give.) Advisory: what cannot be prefaulted (a kernel
 * before 5.14 has no MADV_POPULATE_READ) is said once on stderr and left
 * as it is. Header-only, for the C ranks and the C++ harness alike; a C
 * file includes it with _DEFAULT_SOURCE defined (madvise). */
#ifndef DISTKIT_TESTING_C_PREFAULT_H_
#define DISTKIT_TESTING_C_PREFAULT_H_

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

static inline void dk_test_prefault_files(void) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (maps == NULL) {
    fprintf(stderr, "prefault: cannot read /proc/self/maps (%s)\n",
            strerror(errno));
    return;
  }
  char line[4096];
  int failed = 0, first_err = 0;
  char first[sizeof(line)] = "";
  while (fgets(line, sizeof(line), maps) != NULL) {
    unsigned long start, end;
    char perms[5];
    int path_at = 0;
    if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &start, &end, perms,
               &path_at) < 3 ||
        path_at == 0) {
      continue;
    }
    /* Readable files only: not anonymous memory, not devices or shared
     * memory segments (/dev/shm), which may be shorter than their map. */
    if (perms[0] != 'r' || line[path_at] != '/' ||
        strncmp(line + path_at, "/dev/", 5) == 0) {
      continue;
    }
    if (madvise((void*)start, end - start, MADV_POPULATE_READ) != 0) {
      if (failed++ == 0) {
        first_err = errno;
        snprintf(first, sizeof(first), "%s", line + path_at);
      }
    }
  }
  fclose(maps);
  if (failed > 0) {
    fprintf(stderr,
            "prefault: %d mapping(s) not prefaulted, the first %s"
            "  (madvise(MADV_POPULATE_READ): %s)\n",
            failed, first, strerror(first_err));
  }
}

#endif /* DISTKIT_TESTING_C_PREFAULT_H_ */
