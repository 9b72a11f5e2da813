// The handle structs behind the ABI's opaque types that several sections
// share (store, group, work), how a group argument is resolved, and the
// guards of entry points that take or make a handle. Handles only one
// section uses are defined in that section's file.

#ifndef DISTKIT_CAPI_HANDLES_H_
#define DISTKIT_CAPI_HANDLES_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "cc/comm/work.h"
#include "cc/core/status.h"
#include "cc/group/process_group.h"
#include "cc/store/store.h"
#include "cc/store/store_server.h"
#include "distkit/distkit.h"

struct dk_store {
  std::shared_ptr<distkit::Store> rep;
  std::unique_ptr<distkit::StoreServer> server;  // set by dk_store_serve
  std::string address;
};

// Destroying releases the group but keeps the handle reserved (convention
// 11), and every call may come from any thread (convention 13), so the
// group is read and released atomically: a dk_group_abort beside a
// dk_group_destroy on another thread aborts the group or finds the handle
// destroyed, never a group half released.
struct dk_group {
 public:
  explicit dk_group(std::shared_ptr<distkit::ProcessGroup> rep)
      : rep_(std::move(rep)) {}
  // The group, held for the caller; null once destroyed.
  std::shared_ptr<distkit::ProcessGroup> Get() const {
    return std::atomic_load(&rep_);
  }
  bool destroyed() const { return destroyed_.load(); }
  // Releases the group (the last holder destroys it); idempotent.
  void Destroy() {
    destroyed_.store(true);
    std::shared_ptr<distkit::ProcessGroup> released =
        std::atomic_exchange(&rep_, std::shared_ptr<distkit::ProcessGroup>());
  }

 private:
  std::shared_ptr<distkit::ProcessGroup> rep_;
  std::atomic<bool> destroyed_{false};
};

struct dk_work {
  std::shared_ptr<distkit::Work> rep;
  // The group stays alive while its work is referenced.
  std::shared_ptr<distkit::ProcessGroup> group;
};

namespace distkit {
namespace capi {

// The group an argument names: itself, or the default group for NULL.
absl::StatusOr<std::shared_ptr<ProcessGroup>> GroupOf(dk_group_t* group);

// For calls that also run in a process outside a job: GroupOf(group), or
// nullptr for a NULL group when this process is not distributed.
absl::StatusOr<std::shared_ptr<ProcessGroup>> GroupOrNone(dk_group_t* group);

// Guard for a call on a handle: "<what> is NULL" for a NULL `handle`, else
// `body(*handle)` (an absl::Status).
template <typename Handle, typename F>
dk_status_t OnHandle(Handle* handle, const char* what, dk_error_t** err,
                     F&& body) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(handle, what));
    return body(*handle);
  });
}

// Guard for a call that makes a handle: "out is NULL" before anything else,
// then *out = make() (an absl::StatusOr of the new handle), set only when
// the call succeeds.
template <typename Handle, typename F>
dk_status_t NewHandle(Handle** out, dk_error_t** err, F&& make) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(*out, make());
    return absl::OkStatus();
  });
}

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_HANDLES_H_
