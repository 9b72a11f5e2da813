#include "cc/core/shared_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace distkit {
namespace {

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlopen error";
}

}  // namespace

std::vector<std::string> LibDirsFromEnv(const char* env) {
  const char* v = std::getenv(env);
  if (v == nullptr || *v == '\0') return {};
  return {absl::StrCat(v, "/lib64"), absl::StrCat(v, "/lib")};
}

LibrarySearch CudaToolkitSearch(std::string what, std::string soname,
                                std::string override_env,
                                std::initializer_list<const char*> home_envs) {
  LibrarySearch search;
  search.what = std::move(what);
  search.soname = std::move(soname);
  search.override_env = std::move(override_env);
  for (const char* env : home_envs) {
    for (std::string& dir : LibDirsFromEnv(env)) {
      search.dirs.push_back(std::move(dir));
    }
  }
  search.fallback_dirs = {"/usr/local/cuda/lib64", "/usr/local/cuda/lib"};
  return search;
}

absl::StatusOr<SharedLibrary> OpenSharedLibrary(const LibrarySearch& search) {
  std::vector<std::string> tried;
  auto attempt = [&](const std::string& path, int extra_flags,
                     const char* label) -> void* {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | extra_flags);
    if (h == nullptr && label != nullptr) {
      tried.push_back(absl::StrCat(path, " (", label, ": ", DlError(), ")"));
    }
    return h;
  };
  const char* override_path = search.override_env.empty()
                                  ? nullptr
                                  : std::getenv(search.override_env.c_str());
  if (override_path != nullptr && *override_path != '\0') {
    if (void* h = attempt(override_path, 0, search.override_env.c_str())) {
      return SharedLibrary{h, override_path};
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", search.what, " from ", search.override_env,
                     ": ", absl::StrJoin(tried, "; ")));
  }
  if (void* h = attempt(search.soname, RTLD_NOLOAD, nullptr)) {
    return SharedLibrary{h, search.soname + " (already loaded)"};
  }
  dlerror();  // the NOLOAD miss is not an error worth reporting
  for (const std::string& dir : search.dirs) {
    const std::string path = absl::StrCat(dir, "/", search.soname);
    if (void* h = attempt(path, 0, "dir")) return SharedLibrary{h, path};
  }
  if (void* h = attempt(search.soname, 0, "loader path")) {
    return SharedLibrary{h, search.soname};
  }
  for (const std::string& dir : search.fallback_dirs) {
    const std::string path = absl::StrCat(dir, "/", search.soname);
    if (void* h = attempt(path, 0, "default")) return SharedLibrary{h, path};
  }
  return absl::FailedPreconditionError(
      absl::StrCat(search.what, " (", search.soname,
                   ") is not installed or cannot be loaded; tried ",
                   absl::StrJoin(tried, "; "), ". Set ", search.override_env,
                   " to its path"));
}

absl::Status PromoteToGlobal(const SharedLibrary& library) {
  struct link_map* map = nullptr;
  if (dlinfo(library.handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
    return absl::InternalError(
        absl::StrCat("dlinfo(", library.path, "): ", DlError()));
  }
  // Opening an open library again with RTLD_NOLOAD only changes its flags.
  if (dlopen(map->l_name, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL) == nullptr) {
    return absl::InternalError(
        absl::StrCat("making ", map->l_name, "'s symbols global: ", DlError()));
  }
  return absl::OkStatus();
}

absl::StatusOr<void*> FindGlobalSymbol(const char* symbol) {
  dlerror();
  void* p = dlsym(RTLD_DEFAULT, symbol);
  if (p == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("no global ", symbol, " (", DlError(), ")"));
  }
  return p;
}

absl::StatusOr<void*> FindSymbol(const SharedLibrary& library,
                                 const char* symbol) {
  dlerror();
  void* p = dlsym(library.handle, symbol);
  if (p == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(library.path, " has no ", symbol, " (", DlError(),
                     "); it is older than the version distkit was built for"));
  }
  return p;
}

}  // namespace distkit
