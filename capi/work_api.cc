// The C ABI, section "Work": the handle of a non-blocking operation.

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "capi/handles.h"
#include "cc/core/status.h"
#include "distkit/distkit.h"

using ::distkit::capi::Guard;
using ::distkit::capi::NotNull;

extern "C" {

dk_status_t dk_work_test(const dk_work_t* work, dk_work_state_t* state_out,
                         dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(work, "work"));
    DK_RETURN_IF_ERROR(NotNull(state_out, "state_out"));
    *state_out = static_cast<dk_work_state_t>(work->rep->state());
    return absl::OkStatus();
  });
}

dk_status_t dk_work_wait(dk_work_t* work, int64_t timeout_ms,
                         dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(work, "work"));
    return work->rep->Wait(timeout_ms < 0 ? absl::InfiniteDuration()
                                          : absl::Milliseconds(timeout_ms));
  });
}

void dk_work_destroy(dk_work_t* work) { delete work; }

}  // extern "C"
