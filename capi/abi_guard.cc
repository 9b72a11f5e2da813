#include "capi/abi_guard.h"

#include <exception>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace distkit {
namespace capi {
namespace {

constexpr int kNumCodes = DK_UNAUTHENTICATED + 1;

// The errors reported when there is no memory for one: one per code, so that
// dk_error_code still matches the status the call returned. Never destroyed
// (a caller may read one as late as it likes); made on first use, which may
// throw.
dk_error* StaticErrors() {
  static dk_error* const errors = [] {
    dk_error* made = new dk_error[kNumCodes];
    for (int code = 0; code < kNumCodes; ++code) {
      made[code] = dk_error{code, "out of memory", true};
    }
    return made;
  }();
  return errors;
}

// Made at load time, so that memory pressure later finds them made.
dk_error* const kStaticErrorsAtLoad = StaticErrors();

// *err (when wanted and unset) = a new error `code` with message a + b.
dk_status_t ReportText(dk_status_t code, absl::string_view a,
                       absl::string_view b, dk_error_t** err) noexcept {
  if (err == nullptr || *err != nullptr) return code;
  try {
    *err = new dk_error{code, absl::StrCat(a, b)};
  } catch (...) {
    // No memory for the message: the static error of this code (none, if
    // even those could not be made).
    try {
      *err = &StaticErrors()[code >= 0 && code < kNumCodes ? code : DK_UNKNOWN];
    } catch (...) {
    }
  }
  return code;
}

}  // namespace

dk_status_t Report(const absl::Status& status, dk_error_t** err) noexcept {
  if (status.ok()) return DK_OK;
  return ReportText(static_cast<dk_status_t>(status.code()), status.message(),
                    "", err);
}

dk_status_t ReportCurrentException(dk_error_t** err) noexcept {
  // Rethrows the exception in flight to tell its kinds apart. No
  // absl::Status is built here: one with a message allocates.
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return ReportText(DK_RESOURCE_EXHAUSTED, "out of memory", "", err);
  } catch (const std::exception& e) {
    return ReportText(DK_INTERNAL, "unexpected exception: ", e.what(), err);
  } catch (...) {
    return ReportText(DK_INTERNAL, "unexpected non-standard exception", "",
                      err);
  }
}

}  // namespace capi
}  // namespace distkit
