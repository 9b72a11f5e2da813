// FastNow(): absl::Now() read straight from clock_gettime(CLOCK_REALTIME),
// for clock reads on the per-operation path (the start of a wait's
// deadline). Debian's Abseil computes absl::Now() through
// its cycle-clock calibration: about 110 ns a call on these machines against
// 31 ns for the vDSO clock_gettime, and a small collective read it four to
// six times. Same clock, same epoch: the results mix freely with absl::Now().
//
// FastTicks(): cheaper still, for times that are only recorded and read back
// rarely (the flight recorder's, where a timeline asks for microseconds; it
// uses the kernel's coarse clock otherwise): the x86 time-stamp counter, 9 ns
// a read on these machines against 21 ns for the vDSO clock_gettime
// (RESULTS.md, "The cost of safety" and its second pass); elsewhere,
// CLOCK_REALTIME in nanoseconds. TickAnchor turns ticks back into times.

#ifndef DISTKIT_CC_CORE_FAST_CLOCK_H_
#define DISTKIT_CC_CORE_FAST_CLOCK_H_

#include <time.h>

#include <cstdint>

#include "absl/time/time.h"

namespace distkit {

inline absl::Time FastNow() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return absl::TimeFromTimespec(ts);
}

inline int64_t FastTicks() {
#if defined(__x86_64__)
  return static_cast<int64_t>(__builtin_ia32_rdtsc());
#else
  return absl::ToUnixNanos(FastNow());
#endif
}

// A moment seen on both clocks. Two anchors map ticks between them (or
// shortly after) to times; the later one is the origin, so recent ticks map
// exactly up to the counter's drift over their age.
struct TickAnchor {
  absl::Time time;
  int64_t ticks;

  static TickAnchor Now() { return {FastNow(), FastTicks()}; }

  // `ticks`, read between `earlier` and this anchor (or after), as a time.
  absl::Time TimeOf(int64_t at, const TickAnchor& earlier) const {
    const double ns = absl::ToDoubleNanoseconds(time - earlier.time);
    const double per_ns =
        ns > 0 ? static_cast<double>(ticks - earlier.ticks) / ns : 1.0;
    if (per_ns <= 0) return time;
    return time + absl::Nanoseconds(static_cast<double>(at - ticks) / per_ns);
  }
};

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_FAST_CLOCK_H_
