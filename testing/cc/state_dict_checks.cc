#include "testing/cc/state_dict_checks.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace testing {

StateDict ParametersOf(torch::nn::Module& m) {
  StateDict state;
  for (const auto& p : m.named_parameters()) {
    state.insert(p.key(), p.value().detach().clone());
  }
  return state;
}

void CheckClose(const StateDict& got, const StateDict& want, double tolerance,
                const std::string& what) {
  Check(
      got.size() == want.size(),
      absl::StrCat(what, ": ", got.size(), " tensors, expected ", want.size()));
  for (const auto& item : want) {
    const torch::Tensor* g = got.find(item.key());
    if (g == nullptr) {
      Check(false, absl::StrCat(what, ": no ", item.key()));
      continue;
    }
    if (absl::EndsWith(item.key(), ".step")) {
      Check(torch::equal(*g, item.value()),
            absl::StrCat(what, ": ", item.key(), " is ", g->item<int64_t>(),
                         ", expected ", item.value().item<int64_t>()));
      continue;
    }
    const double err = (*g - item.value()).norm().item<double>() /
                       std::max(item.value().norm().item<double>(), 1e-12);
    Check(err <= tolerance,
          absl::StrCat(what, ": ", item.key(), " differs by ", err,
                       " (relative), tolerance ", tolerance));
  }
}

bool Equal(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& item : a) {
    const torch::Tensor* other = b.find(item.key());
    if (other == nullptr || !torch::equal(item.value(), *other)) return false;
  }
  return true;
}

}  // namespace testing
}  // namespace distkit
