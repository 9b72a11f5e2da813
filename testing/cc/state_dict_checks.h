// Comparisons of LibTorch state dicts for the multi-rank tests of the
// LibTorch wrappers (cc/torch): parameters against a reference trained
// alone, and exact round trips. Failures go through rank_check's Check.

#ifndef DISTKIT_TESTING_CC_STATE_DICT_CHECKS_H_
#define DISTKIT_TESTING_CC_STATE_DICT_CHECKS_H_

#include <torch/nn/module.h>
#include <torch/ordered_dict.h>
#include <torch/types.h>

#include <string>

namespace distkit {
namespace testing {

using StateDict = torch::OrderedDict<std::string, torch::Tensor>;

// `m`'s parameters by name, detached copies.
StateDict ParametersOf(torch::nn::Module& m);

// The same names as `want`, each within `tolerance` of it (relative, by
// norm); an optimizer's step counts (".step") exactly.
void CheckClose(const StateDict& got, const StateDict& want, double tolerance,
                const std::string& what);

// The same names and bit-identical values.
bool Equal(const StateDict& a, const StateDict& b);

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_STATE_DICT_CHECKS_H_
