#include "testing/cc/time_scale.h"

#include <cstdlib>

namespace distkit {
namespace testing {
namespace {

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DK_TEST_TSAN 1
#endif
#if __has_feature(address_sanitizer)
#define DK_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define DK_TEST_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DK_TEST_ASAN 1
#endif

double BuildScale() {
#if defined(DK_TEST_TSAN)
  return 4;
#elif defined(DK_TEST_ASAN)
  return 2;
#else
  return 1;
#endif
}

}  // namespace

double TimeScale() {
  static const double scale = [] {
    if (const char* s = std::getenv("DISTKIT_TEST_TIME_SCALE")) {
      const double v = std::atof(s);
      if (v > 0) return v;
    }
    return BuildScale();
  }();
  return scale;
}

absl::Duration Scaled(absl::Duration d) { return d * TimeScale(); }

}  // namespace testing
}  // namespace distkit
