// The C ABI, section "Versions": whether a caller's header fits this library.

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "capi/entry_point.h"
#include "distkit/distkit.h"

extern "C" {

dk_status_t dk_init_version(int32_t major, int32_t minor, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    if (major != DK_ABI_MAJOR || minor > DK_ABI_MINOR) {
      return absl::FailedPreconditionError(absl::StrCat(
          "distkit ABI mismatch: the caller was built for ", major, ".", minor,
          " but this library provides ", DK_ABI_MAJOR, ".", DK_ABI_MINOR));
    }
    return absl::OkStatus();
  });
}

void dk_get_version(int32_t* major, int32_t* minor) {
  if (major != nullptr) *major = DK_ABI_MAJOR;
  if (minor != nullptr) *minor = DK_ABI_MINOR;
}

}  // extern "C"
