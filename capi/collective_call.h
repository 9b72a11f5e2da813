// The one body every collective entry point shares (dk_group_all_reduce to
// dk_group_recv): under the guard, the group (NULL: the default group), the
// arguments checked in order, then the operation, blocking when the caller
// passed no work_out, else started and handed back as *work_out.

#ifndef DISTKIT_CAPI_COLLECTIVE_CALL_H_
#define DISTKIT_CAPI_COLLECTIVE_CALL_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "capi/abi_guard.h"
#include "capi/handles.h"
#include "cc/comm/work.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

namespace distkit {
namespace capi {

namespace collective_internal {

// An argument of a collective: a value, or a conversion that may have
// failed (absl::StatusOr).
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& arg) {
  return arg.status();
}
template <typename T>
absl::Status StatusOf(const T&) {
  return absl::OkStatus();
}
template <typename T>
T& ValueOf(absl::StatusOr<T>& arg) {
  return *arg;
}
template <typename T>
T& ValueOf(T& arg) {
  return arg;
}

// The first failed argument's status, from the left; OK when none failed.
template <typename... Args>
absl::Status FirstError(const Args&... args) {
  absl::Status first;
  (first.Update(StatusOf(args)), ...);  // Update keeps the first error.
  return first;
}

}  // namespace collective_internal

// One collective operation about to be issued on a group.
class CollectiveCall {
 public:
  CollectiveCall(std::shared_ptr<ProcessGroup> group, dk_work_t** work_out)
      : group_(std::move(group)), work_out_(work_out) {}

  const ProcessGroup& group() const { return *group_; }

  // A tensor argument a rooted collective reads on `root` only: converted
  // there, an empty TensorRef on every other rank (which may pass NULL).
  absl::StatusOr<TensorRef> TensorOnRoot(const DLTensor* t, int32_t root,
                                         const char* what) const;

  // Issues the operation with `args` (values or absl::StatusOr, checked left
  // to right: the first error is the result): `blocking` when the caller
  // passed no work_out, else `start`, its work handed back.
  template <typename... Params, typename... Args>
  absl::Status operator()(
      absl::Status (ProcessGroup::*blocking)(Params...),
      std::shared_ptr<Work> (ProcessGroup::*start)(Params...), Args&&... args) {
    DK_RETURN_IF_ERROR(collective_internal::FirstError(args...));
    if (work_out_ == nullptr) {
      return (group_.get()->*blocking)(collective_internal::ValueOf(args)...);
    }
    return Finish(
        (group_.get()->*start)(collective_internal::ValueOf(args)...));
  }

  // The same for an operation issued only in its started form (point to
  // point): a blocking call starts it and waits for its work.
  template <typename... Params, typename... Args>
  absl::Status Start(std::shared_ptr<Work> (ProcessGroup::*start)(Params...),
                     Args&&... args) {
    DK_RETURN_IF_ERROR(collective_internal::FirstError(args...));
    return Finish(
        (group_.get()->*start)(collective_internal::ValueOf(args)...));
  }

 private:
  // Waits for `work` (a blocking call) or hands it back in *work_out.
  // Argument errors surface at once either way, since a rejected
  // operation's work is already complete.
  absl::Status Finish(std::shared_ptr<Work> work);

  std::shared_ptr<ProcessGroup> group_;
  dk_work_t** work_out_;
};

// A collective entry point's whole body: `issue(CollectiveCall&)` converts
// the arguments and issues the operation through the call.
template <typename Issue>
dk_status_t RunCollective(dk_group_t* group, dk_work_t** work_out,
                          dk_error_t** err, Issue&& issue) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    CollectiveCall call(std::move(g), work_out);
    return issue(call);
  });
}

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_COLLECTIVE_CALL_H_
