// SimSymbol: a function the CUDA + NCCL simulator exports for tests
// (dksim*), looked up in the simulator this process already loaded (the
// library DISTKIT_CUDART_LIBRARY names); the rank ends with a failed check
// where it is not there.

#ifndef DISTKIT_TESTING_CC_SIM_SYMBOL_H_
#define DISTKIT_TESTING_CC_SIM_SYMBOL_H_

#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace testing {

inline void* SimSymbol(const char* name) {
  const char* path = std::getenv("DISTKIT_CUDART_LIBRARY");
  Require(path != nullptr, "DISTKIT_CUDART_LIBRARY names the simulator");
  void* sim = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  Require(sim != nullptr, "the simulator is loaded");
  void* f = dlsym(sim, name);
  Require(f != nullptr, absl::StrCat("the simulator exports ", name));
  return f;
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_SIM_SYMBOL_H_
