// The C ABI, section "Status codes and errors": reading and freeing the
// errors the guard reports, and freeing memory handed to the caller.

#include <cstdlib>

#include "capi/abi_guard.h"
#include "distkit/distkit.h"

extern "C" {

dk_status_t dk_error_code(const dk_error_t* err) {
  return err == nullptr ? DK_OK : err->code;
}

const char* dk_error_message(const dk_error_t* err) {
  return err == nullptr ? "" : err->message.c_str();
}

void dk_error_free(dk_error_t* err) {
  // A static error (out of memory) belongs to the library.
  if (err != nullptr && !err->is_static) delete err;
}

void dk_free(void* ptr) { std::free(ptr); }

}  // extern "C"
