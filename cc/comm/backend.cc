#include "cc/comm/backend.h"

#include "absl/strings/str_cat.h"

namespace distkit {

std::string OpContext::Describe() const {
  return absl::StrCat(op_name, " #", seq, " on group '", group_name, "'");
}

absl::Status Backend::CheckDevice(Device device) const {
  if (device.is_cpu()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the ", name(), " backend works on cpu tensors, got one on ",
                   device.ToString()));
}

absl::StatusOr<std::unique_ptr<Backend>> Backend::Split(
    const OpContext& ctx, const std::vector<int>& parent_ranks) {
  return absl::UnimplementedError(absl::StrCat(
      ctx.Describe(), ": the ", name(), " backend does not split groups"));
}

}  // namespace distkit
