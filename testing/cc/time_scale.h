// How much longer than a plain build a test's time bounds must be. Bounds
// that a test checks ("fails within 2 s", "not the 30 s op timeout") hold on
// a plain build on 2 busy cores; under a sanitizer every instruction costs
// several times more, so the same bound would fail by chance. Scaled() is the
// one place that knows by how much, so no test loosens its own bound.
//
// DISTKIT_TEST_TIME_SCALE (a positive number) overrides the factor, for a
// slower machine or a debugger.

#ifndef DISTKIT_TESTING_CC_TIME_SCALE_H_
#define DISTKIT_TESTING_CC_TIME_SCALE_H_

#include "absl/time/time.h"

namespace distkit {
namespace testing {

// 4 under ThreadSanitizer, 2 under AddressSanitizer, else 1.
double TimeScale();

// `d` times TimeScale().
absl::Duration Scaled(absl::Duration d);

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_TIME_SCALE_H_
