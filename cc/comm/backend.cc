#include "cc/comm/backend.h"

#include "absl/strings/str_cat.h"
#include "cc/core/data_type.h"

namespace distkit {

bool PoisonsGroup(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return false;
    default:
      return true;
  }
}

absl::Status Backend::ExchangeSignatures(const OpContext& ctx,
                                         const OpSignature& mine,
                                         InlinePayload /*payload*/,
                                         absl::Span<OpSignature> all) {
  return AllGatherHost(ctx, &mine, sizeof(OpSignature), all.data());
}

absl::Status Backend::AllGatherHost(const OpContext& ctx, const void* in,
                                    size_t bytes, void* out) {
  const int64_t n = static_cast<int64_t>(bytes);
  return AllGather(ctx, TensorRef(const_cast<void*>(in), n, DataType::kUInt8),
                   TensorRef(out, n * size(), DataType::kUInt8));
}

absl::Status Backend::CheckReduce(ReduceOp /*op*/, DataType /*dtype*/,
                                  Device /*device*/) const {
  return absl::OkStatus();
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

absl::StatusOr<std::unique_ptr<Backend>> Backend::CreateAmongMembers(
    const OpContext&, const std::vector<int>&, absl::string_view) {
  return std::unique_ptr<Backend>();  // connect afresh through the store
}

}  // namespace distkit
