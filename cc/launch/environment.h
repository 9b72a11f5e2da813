// Environment is a snapshot of environment variables. Launcher parsing takes
// one instead of calling getenv, so tests can describe any launcher's
// variables without touching the process environment.

#ifndef DISTKIT_CC_LAUNCH_ENVIRONMENT_H_
#define DISTKIT_CC_LAUNCH_ENVIRONMENT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distkit {

class Environment {
 public:
  Environment() = default;
  explicit Environment(std::map<std::string, std::string> vars)
      : vars_(std::move(vars)) {}

  // The current process's variables.
  static Environment FromProcess();

  std::optional<std::string> Get(absl::string_view name) const;
  bool Has(absl::string_view name) const { return Get(name).has_value(); }
  void Set(absl::string_view name, absl::string_view value);

  // The variable as an integer. NOT_FOUND when unset; INVALID_ARGUMENT when set
  // but not an integer. Both messages name the variable.
  absl::StatusOr<int64_t> GetInt(absl::string_view name) const;
  // Like GetInt, but `fallback` when unset.
  absl::StatusOr<int64_t> GetInt(absl::string_view name,
                                 int64_t fallback) const;

  const std::map<std::string, std::string>& vars() const { return vars_; }

 private:
  std::map<std::string, std::string> vars_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_LAUNCH_ENVIRONMENT_H_
