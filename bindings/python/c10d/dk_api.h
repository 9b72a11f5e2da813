// The C ABI functions the c10d extension calls, resolved from the
// libdistkit.so the Python package loaded (its dlopen handle, from ctypes),
// so that the extension and `distkit.dist` always share one library and one
// default group, whichever file $DISTKIT_LIBRARY names. The extension does
// not link libdistkit.so.

#ifndef DISTKIT_BINDINGS_PYTHON_C10D_DK_API_H_
#define DISTKIT_BINDINGS_PYTHON_C10D_DK_API_H_

#include <string>

#include "distkit/distkit.h"

namespace distkit {
namespace c10d_ext {

struct DkApi {
#define DK_API_FN(name) decltype(&::name) name = nullptr
  DK_API_FN(dk_init_version);
  DK_API_FN(dk_error_message);
  DK_API_FN(dk_error_free);
  DK_API_FN(dk_group_rank);
  DK_API_FN(dk_group_size);
  DK_API_FN(dk_group_name);
  DK_API_FN(dk_group_comm_device);
  DK_API_FN(dk_group_set_cuda_stream);
  DK_API_FN(dk_work_test);
  DK_API_FN(dk_work_wait);
  DK_API_FN(dk_work_destroy);
  DK_API_FN(dk_work_on_complete);
  DK_API_FN(dk_group_all_reduce);
  DK_API_FN(dk_group_broadcast);
  DK_API_FN(dk_group_reduce);
  DK_API_FN(dk_group_all_gather);
  DK_API_FN(dk_group_gather);
  DK_API_FN(dk_group_scatter);
  DK_API_FN(dk_group_reduce_scatter);
  DK_API_FN(dk_group_all_to_all);
  DK_API_FN(dk_group_barrier);
  DK_API_FN(dk_group_send);
  DK_API_FN(dk_group_recv);
#undef DK_API_FN
};

// Resolves every function from `library` (a dlopen handle) and checks the
// library's ABI version against this header's. Throws std::runtime_error
// naming what is missing. Call once, before any process group is made.
void LoadDkApi(void* library);

// The table LoadDkApi filled; throws when it has not run.
const DkApi& Dk();

// The message of `err` (then freed); `fallback` when err is NULL.
std::string TakeErrorMessage(dk_error_t* err, const std::string& fallback);

}  // namespace c10d_ext
}  // namespace distkit

#endif  // DISTKIT_BINDINGS_PYTHON_C10D_DK_API_H_
