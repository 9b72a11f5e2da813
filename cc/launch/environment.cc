#include "cc/launch/environment.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace distkit {

Environment Environment::FromProcess() {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos) continue;
    vars.emplace(std::string(entry.substr(0, eq)),
                 std::string(entry.substr(eq + 1)));
  }
  return Environment(std::move(vars));
}

std::optional<std::string> Environment::Get(absl::string_view name) const {
  auto it = vars_.find(std::string(name));
  if (it == vars_.end()) return std::nullopt;
  return it->second;
}

void Environment::Set(absl::string_view name, absl::string_view value) {
  vars_[std::string(name)] = std::string(value);
}

absl::StatusOr<int64_t> Environment::GetInt(absl::string_view name) const {
  std::optional<std::string> text = Get(name);
  if (!text.has_value()) {
    return absl::NotFoundError(
        absl::StrCat("environment variable ", name, " is not set"));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "environment variable ", name, "='", *text, "' is not an integer"));
  }
  return value;
}

absl::StatusOr<int64_t> Environment::GetInt(absl::string_view name,
                                            int64_t fallback) const {
  if (!Has(name)) return fallback;
  return GetInt(name);
}

}  // namespace distkit
