// Built without CUDA's headers: there is no caller's stream to make.
#include "testing/cc/caller_stream.h"

namespace distkit {
namespace testing {

struct CallerStream::State {};

CallerStream::CallerStream(std::unique_ptr<State> state)
    : state_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<CallerStream>> CallerStream::Create(
    std::shared_ptr<ProcessGroup>) {
  return absl::FailedPreconditionError("built without CUDA's headers");
}

CallerStream::~CallerStream() = default;
bool CallerStream::Sleep(long) { return false; }
absl::Status CallerStream::Write(void*, const void*, size_t) {
  return absl::FailedPreconditionError("built without CUDA's headers");
}
absl::Status CallerStream::Read(void*, const void*, size_t) {
  return absl::FailedPreconditionError("built without CUDA's headers");
}

}  // namespace testing
}  // namespace distkit
