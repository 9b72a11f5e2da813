// Opening an optional system library (the CUDA runtime, NCCL, OpenMPI) with
// dlopen at first use, so that one libdistkit.so loads on machines with and
// without them: they are never NEEDED entries. The search order, first hit
// wins:
//   1. an explicit path in `override_env` (then only that path is tried);
//   2. the same soname already loaded in this process (PyTorch's copy, say),
//      so that one process never holds two instances;
//   3. each directory in `dirs` (from CUDA_HOME, NCCL_HOME, ...), in order;
//   4. the bare soname through the loader path (LD_LIBRARY_PATH, ldconfig);
//   5. each directory in `fallback_dirs` (/usr/local/cuda's).
// When nothing loads, the error names every place tried and why it failed.

#ifndef DISTKIT_CC_CORE_SHARED_LIBRARY_H_
#define DISTKIT_CC_CORE_SHARED_LIBRARY_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distkit {

struct LibrarySearch {
  std::string what;          // for messages: "the CUDA runtime"
  std::string soname;        // "libcudart.so.13"
  std::string override_env;  // "DISTKIT_CUDART_LIBRARY"
  std::vector<std::string> dirs;
  std::vector<std::string> fallback_dirs;
};

// A library opened by OpenSharedLibrary; it stays loaded for the process's
// life (unloading CUDA while its threads run is never safe).
struct SharedLibrary {
  void* handle = nullptr;
  std::string path;  // where it was found, for messages
};

// FAILED_PRECONDITION naming every candidate when none opens.
absl::StatusOr<SharedLibrary> OpenSharedLibrary(const LibrarySearch& search);

// The address of `symbol` in `library`; FAILED_PRECONDITION naming both when
// it is missing (a library too old for this distkit).
absl::StatusOr<void*> FindSymbol(const SharedLibrary& library,
                                 const char* symbol);

// Makes `library`'s symbols global (RTLD_GLOBAL), for a library whose own
// plugins, opened later with dlopen, resolve them from the global scope
// (OpenMPI's components). Done once its entry points were found, so that a
// wrong file named by an override never lands in the global scope.
absl::Status PromoteToGlobal(const SharedLibrary& library);

// The process's definition of the data symbol `symbol` as the loader binds
// it (RTLD_DEFAULT): the executable's copy where it has one (a copy
// relocation, as a PIE that names a library's global gets), else the
// library's own. A library's globals must be taken this way, not from its
// handle, once it is in the global scope.
absl::StatusOr<void*> FindGlobalSymbol(const char* symbol);

// Resolves `symbol` into the function pointer `*out`.
template <typename Fn>
absl::Status ResolveSymbol(const SharedLibrary& library, const char* symbol,
                           Fn* out) {
  absl::StatusOr<void*> p = FindSymbol(library, symbol);
  if (!p.ok()) return p.status();
  *out = reinterpret_cast<Fn>(*p);
  return absl::OkStatus();
}

// The process's one table of a library's entry points, made by `Load` at the
// first call (thread-safe) and kept: dlopen is costly and its answer does not
// change, so a library that failed to load fails alike on every call.
template <typename Library, absl::StatusOr<Library> (*Load)()>
absl::StatusOr<const Library*> LoadOnce() {
  static const absl::StatusOr<Library>* const loaded =
      new absl::StatusOr<Library>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

// `${env}/lib64` and `${env}/lib` when the variable is set and non-empty.
std::vector<std::string> LibDirsFromEnv(const char* env);

// Where a library of CUDA's toolkit or one installed beside it (NCCL) is
// looked for: `override_env` names it outright; else the lib directories of
// each of `home_envs` in order (LibDirsFromEnv), the loader's own path, and
// /usr/local/cuda's last.
LibrarySearch CudaToolkitSearch(std::string what, std::string soname,
                                std::string override_env,
                                std::initializer_list<const char*> home_envs);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_SHARED_LIBRARY_H_
