#include "cc/core/bench_without.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace distkit {

absl::StatusOr<BenchWithout> ParseBenchWithout(absl::string_view spec) {
  BenchWithout off;
  for (absl::string_view word : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    word = absl::StripAsciiWhitespace(word);
    if (word.empty()) continue;
    if (word == "flight_recorder") {
      off.flight_recorder = true;
    } else if (word == "watch_threads") {
      off.watch_threads = true;
    } else if (word == "agreement") {
      off.agreement = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "DISTKIT_BENCH_WITHOUT: unknown feature '", word,
          "' (flight_recorder, watch_threads, agreement; for benchmarks "
          "only)"));
    }
  }
  return off;
}

absl::StatusOr<BenchWithout> BenchWithoutFromEnvironment() {
  const char* env = std::getenv("DISTKIT_BENCH_WITHOUT");
  if (env == nullptr) return BenchWithout{};
  absl::StatusOr<BenchWithout> off = ParseBenchWithout(env);
  // Safety that is off must never go unnoticed: say so, once per process.
  static std::atomic<bool> warned{false};
  if (off.ok() && off->any() && !warned.exchange(true)) {
    fprintf(stderr,
            "distkit: DISTKIT_BENCH_WITHOUT=%s turns safety features off; "
            "for benchmarks only\n",
            env);
  }
  return off;
}

}  // namespace distkit
