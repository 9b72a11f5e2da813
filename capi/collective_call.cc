#include "capi/collective_call.h"

#include "capi/arguments.h"

namespace distkit {
namespace capi {

absl::StatusOr<TensorRef> CollectiveCall::TensorOnRoot(const DLTensor* t,
                                                       int32_t root,
                                                       const char* what) const {
  if (group_->rank() != root) return TensorRef();
  return TensorArg(t, what);
}

absl::Status CollectiveCall::Finish(std::shared_ptr<Work> work) {
  if (work_out_ == nullptr) return work->Wait();
  if (work->Test() && !work->status().ok()) return work->status();
  *work_out_ = new dk_work{std::move(work), group_};
  return absl::OkStatus();
}

}  // namespace capi
}  // namespace distkit
