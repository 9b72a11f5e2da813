#include "bindings/python/c10d/dk_api.h"

#include <dlfcn.h>

#include <stdexcept>

namespace distkit {
namespace c10d_ext {
namespace {

DkApi api;
bool loaded = false;

template <typename Fn>
void Resolve(void* library, const char* name, Fn* fn) {
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    throw std::runtime_error(std::string("distkit c10d extension: ") + name +
                             " is missing from libdistkit.so (an older "
                             "library than the extension)");
  }
  *fn = reinterpret_cast<Fn>(symbol);
}

}  // namespace

void LoadDkApi(void* library) {
  if (library == nullptr) {
    throw std::runtime_error(
        "distkit c10d extension: no libdistkit.so handle given");
  }
  DkApi a;
#define DK_RESOLVE(name) Resolve(library, #name, &a.name)
  DK_RESOLVE(dk_init_version);
  DK_RESOLVE(dk_error_message);
  DK_RESOLVE(dk_error_free);
  DK_RESOLVE(dk_group_rank);
  DK_RESOLVE(dk_group_size);
  DK_RESOLVE(dk_group_name);
  DK_RESOLVE(dk_group_comm_device);
  DK_RESOLVE(dk_group_set_cuda_stream);
  DK_RESOLVE(dk_work_test);
  DK_RESOLVE(dk_work_wait);
  DK_RESOLVE(dk_work_destroy);
  DK_RESOLVE(dk_work_on_complete);
  DK_RESOLVE(dk_group_all_reduce);
  DK_RESOLVE(dk_group_broadcast);
  DK_RESOLVE(dk_group_reduce);
  DK_RESOLVE(dk_group_all_gather);
  DK_RESOLVE(dk_group_gather);
  DK_RESOLVE(dk_group_scatter);
  DK_RESOLVE(dk_group_reduce_scatter);
  DK_RESOLVE(dk_group_all_to_all);
  DK_RESOLVE(dk_group_barrier);
  DK_RESOLVE(dk_group_send);
  DK_RESOLVE(dk_group_recv);
#undef DK_RESOLVE
  api = a;
  dk_error_t* err = nullptr;
  if (a.dk_init_version(DK_ABI_MAJOR, DK_ABI_MINOR, &err) != DK_OK) {
    throw std::runtime_error("distkit c10d extension: " +
                             TakeErrorMessage(err, "ABI version refused"));
  }
  loaded = true;
}

const DkApi& Dk() {
  if (!loaded) {
    throw std::runtime_error(
        "distkit c10d extension: not initialized (import distkit first)");
  }
  return api;
}

std::string TakeErrorMessage(dk_error_t* err, const std::string& fallback) {
  if (err == nullptr || api.dk_error_message == nullptr) {
    return fallback;
  }
  std::string message = api.dk_error_message(err);
  api.dk_error_free(err);
  return message;
}

}  // namespace c10d_ext
}  // namespace distkit
