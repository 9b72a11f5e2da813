#include "cc/store/store.h"

namespace distkit {

absl::StatusOr<std::string> Store::Get(absl::string_view key,
                                       absl::Duration timeout) {
  const std::string keys[1] = {std::string(key)};
  absl::StatusOr<std::vector<std::string>> values =
      MultiGetWithTimeout(keys, timeout);
  if (!values.ok()) return values.status();
  return std::move((*values)[0]);
}

}  // namespace distkit
