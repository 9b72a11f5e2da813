#include "cc/elastic/registered_buffers.h"

#include "absl/strings/str_cat.h"
#include "cc/core/status.h"

namespace distkit {
namespace elastic {

absl::Status RegisteredBuffers::Register(absl::string_view name, void* data,
                                         int64_t bytes) {
  if (frozen_) {
    return absl::FailedPreconditionError(absl::StrCat(
        owner_, ": buffer '", name, "' registered after the first ", frozen_by_,
        ": register every buffer before", advice_));
  }
  if (data == nullptr && bytes > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(owner_, ": buffer '", name, "' of ", bytes,
                     " bytes has no memory (a NULL pointer)"));
  }
  DK_RETURN_IF_ERROR(layout_.Add(name, bytes));
  data_.push_back(data);
  return absl::OkStatus();
}

}  // namespace elastic
}  // namespace distkit
