// The first steps of a multi-rank test program of the dist API: read the
// backend it was given, join the job the launcher started (init_dist
// "pytorch"), and say why not when that fails.

#ifndef DISTKIT_TESTING_CC_DIST_JOB_H_
#define DISTKIT_TESTING_CC_DIST_JOB_H_

#include <cstdio>
#include <initializer_list>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cc/dist_api/dist.h"

namespace distkit {
namespace testing {

// argv[1] when it is one of `allowed`; otherwise prints the usage
// ("usage: <program> a|b") and returns nullopt.
inline std::optional<std::string> BackendArgument(
    int argc, char** argv, std::initializer_list<const char*> allowed) {
  if (argc == 2) {
    for (const char* a : allowed) {
      if (argv[1] == std::string(a)) return std::string(a);
    }
  }
  std::fprintf(stderr, "usage: %s %s\n", argc > 0 ? argv[0] : "test",
               absl::StrJoin(allowed, "|").c_str());
  return std::nullopt;
}

// dist::InitDist("pytorch") on `backend` ("" for the default) with a 60 s
// timeout; prints the error and returns false when it fails.
inline bool JoinDistJob(const std::string& backend) {
  dist::InitOptions options;
  if (!backend.empty()) options.backend = backend;
  options.timeout = absl::Seconds(60);
  absl::Status joined = dist::InitDist("pytorch", options);
  if (!joined.ok()) {
    std::fprintf(stderr, "init_dist: %s\n", joined.ToString().c_str());
    return false;
  }
  return true;
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_DIST_JOB_H_
