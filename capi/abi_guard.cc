#include "capi/abi_guard.h"

#include <exception>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"

namespace distkit {
namespace capi {

dk_status_t Report(const absl::Status& status, dk_error_t** err) {
  if (status.ok()) return DK_OK;
  const dk_status_t code = static_cast<dk_status_t>(status.code());
  if (err != nullptr && *err == nullptr) {
    *err = new (std::nothrow) dk_error{code, std::string(status.message())};
  }
  return code;
}

absl::Status StatusOfCurrentException() {
  // Rethrows the exception in flight to tell its kinds apart.
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory");
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("unexpected exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("unexpected non-standard exception");
  }
}

}  // namespace capi
}  // namespace distkit
