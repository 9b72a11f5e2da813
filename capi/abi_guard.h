// The one guard every fallible entry point of the C ABI runs in: it turns
// absl::Status, and any exception, into dk_status_t + dk_error_t, so that no
// C++ exception crosses the ABI.

#ifndef DISTKIT_CAPI_ABI_GUARD_H_
#define DISTKIT_CAPI_ABI_GUARD_H_

#include <string>

#include "absl/status/status.h"
#include "distkit/distkit.h"

// What a dk_error_t holds (read with dk_error_code / dk_error_message).
struct dk_error {
  dk_status_t code;
  std::string message;
};

namespace distkit {
namespace capi {

// DK_OK for an OK status; else its code, and a new dk_error_t with its
// message in *err when the caller passed err and *err is still unset (the
// first error is the one reported).
dk_status_t Report(const absl::Status& status, dk_error_t** err);

// The exception being handled as a status. Call only inside a catch block.
absl::Status StatusOfCurrentException();

// Runs `body` (returning absl::Status) and reports its status; an exception
// from it is reported as a status instead of leaving the entry point.
template <typename F>
dk_status_t Guard(dk_error_t** err, F&& body) {
  absl::Status status;
  try {
    status = body();
  } catch (...) {
    status = StatusOfCurrentException();
  }
  return Report(status, err);
}

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_ABI_GUARD_H_
