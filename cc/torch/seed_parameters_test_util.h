// Deterministic parameter values for cc/torch's multi-rank tests: every rank
// (and a reference trained alone) builds the same model without
// communicating. Header-only: a unit that includes LibTorch compiles in
// 15-20 s.

#ifndef DISTKIT_CC_TORCH_SEED_PARAMETERS_TEST_UTIL_H_
#define DISTKIT_CC_TORCH_SEED_PARAMETERS_TEST_UTIL_H_

#include <torch/nn/module.h>
#include <torch/types.h>

namespace distkit {
namespace testing {

// Parameter i of `m` (in parameters() order): 0.3 sin(0.37 k + i), plus
// `offset`.
inline void SeedParameters(torch::nn::Module& m, double offset = 0) {
  torch::NoGradGuard no_grad;
  int i = 0;
  for (auto& p : m.parameters()) {
    auto v = 0.3 *
             torch::sin(torch::arange(p.numel(), torch::kFloat32) * 0.37 + i++);
    p.copy_(v.reshape(p.sizes()) + offset);
  }
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_SEED_PARAMETERS_TEST_UTIL_H_
