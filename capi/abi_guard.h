// The one guard every fallible entry point of the C ABI runs in: it turns
// absl::Status, and any exception, into dk_status_t + dk_error_t, so that no
// C++ exception crosses the ABI; and its twins for the entry points that
// answer a value or nothing (getters, destroy, abort, shutdown).

#ifndef DISTKIT_CAPI_ABI_GUARD_H_
#define DISTKIT_CAPI_ABI_GUARD_H_

#include <string>

#include "absl/status/status.h"
#include "distkit/distkit.h"

// What a dk_error_t holds (read with dk_error_code / dk_error_message).
struct dk_error {
  dk_status_t code;
  std::string message;
  // One of the static errors Report falls back on: dk_error_free keeps it.
  bool is_static = false;
};

namespace distkit {
namespace capi {

// DK_OK for an OK status; else its code, and a new dk_error_t with its
// message in *err when the caller passed err and *err is still unset (the
// first error is the one reported). Never throws: where memory runs out for
// the error itself, *err is a static error of the same code whose message
// is "out of memory" (dk_error::is_static).
dk_status_t Report(const absl::Status& status, dk_error_t** err) noexcept;

// The exception being handled, reported as Report does (std::bad_alloc as
// DK_RESOURCE_EXHAUSTED "out of memory"). Call only inside a catch block.
dk_status_t ReportCurrentException(dk_error_t** err) noexcept;

// Runs `body` (returning absl::Status) and reports its status; an exception
// from it, or from building or reporting the status, is reported as a
// status instead of leaving the entry point.
template <typename F>
dk_status_t Guard(dk_error_t** err, F&& body) noexcept {
  try {
    return Report(body(), err);
  } catch (...) {
    return ReportCurrentException(err);
  }
}

// For an entry point that answers a value without a status: `body()`, or
// `fallback` (the answer for a bad argument: -1, 0 or NULL) when it throws,
// e.g. std::bad_alloc under memory pressure.
template <typename T, typename F>
T NoThrow(T fallback, F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    return fallback;
  }
}

// For an entry point that answers nothing (abort, shutdown, a setter): as
// much of `body()` as runs before it throws.
template <typename F>
void BestEffort(F&& body) noexcept {
  try {
    body();
  } catch (...) {
  }
}

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_ABI_GUARD_H_
