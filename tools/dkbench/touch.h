/* --touch for the collective benchmarks (collective_bench.cc, mpi_bench.c):
 * before each call a rank writes its whole input, and after it reads its
 * whole output, as a training step writes its gradients before an
 * all_reduce and reads the parameters after an all_gather. Without it a
 * benchmark loop leaves each line in whichever core last wrote it, which
 * flatters an algorithm whose writer and next writer are the same core.
 * The same loops on both sides, so their cost is the same where the lines
 * are the same. */
#ifndef DISTKIT_TOOLS_DKBENCH_TOUCH_H_
#define DISTKIT_TOOLS_DKBENCH_TOUCH_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Fills `bytes` with the 32-bit `pattern` (whole words; the tail is kept). */
static inline void TouchWrite(void* data, size_t bytes, uint32_t pattern) {
  unsigned char* p = (unsigned char*)data;
  for (size_t i = 0; i + 4 <= bytes; i += 4) memcpy(p + i, &pattern, 4);
}

/* Reads every whole word of `bytes`; the sum keeps the loads. */
static inline uint32_t TouchRead(const void* data, size_t bytes) {
  const unsigned char* p = (const unsigned char*)data;
  uint32_t sum = 0;
  for (size_t i = 0; i + 4 <= bytes; i += 4) {
    uint32_t w;
    memcpy(&w, p + i, 4);
    sum += w;
  }
  return sum;
}

#endif /* DISTKIT_TOOLS_DKBENCH_TOUCH_H_ */
