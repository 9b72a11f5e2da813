#include "cc/core/copy_stream.h"

#include "cc/core/cuda_memory.h"

namespace distkit {
namespace {

thread_local std::optional<CopyStream> t_scope;

}  // namespace

CopyStreamScope::CopyStreamScope(Device device, void* stream) {
  if (!device.is_cuda()) return;
  previous_ = t_scope;
  t_scope = CopyStream{device, stream};
  opened_ = true;
}

CopyStreamScope::~CopyStreamScope() {
  if (opened_) t_scope = previous_;
}

std::optional<CopyStream> CopyStreamFor(Device device) {
  if (t_scope.has_value() && t_scope->device == device) return t_scope;
  return std::nullopt;
}

absl::Status SynchronizeCopyStream() {
  if (!t_scope.has_value()) return absl::OkStatus();
  return cuda_memory::SynchronizeStream(t_scope->device, t_scope->stream);
}

}  // namespace distkit
