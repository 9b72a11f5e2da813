// One rank's model in the GradReducer tests: float32 parameters and
// gradients on a device or the host, with host mirrors. Parameter p starts
// at rank * 100 + p and is named layer<p>.weight; Fill writes the gradient
// formula's values (testing/cc/grad_reducer_values.h); RequireMeanGrad and
// RequireHookAverages check what a reducer averaged.

#ifndef DISTKIT_CC_PARALLEL_GRAD_REDUCER_TEST_MODEL_H_
#define DISTKIT_CC_PARALLEL_GRAD_REDUCER_TEST_MODEL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cc/core/device.h"
#include "cc/core/device_copy.h"
#include "cc/group/process_group.h"
#include "cc/parallel/grad_reducer.h"
#include "testing/cc/extension_device.h"
#include "testing/cc/grad_reducer_values.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace testing {

struct GradReducerTestModel {
  Device device;
  int rank;
  std::vector<std::vector<float>> params, grads;  // host mirrors
  std::vector<ExtTensor> ext_params, ext_grads;   // off the host only

  GradReducerTestModel(Device d, int r, const std::vector<int64_t>& sizes)
      : device(d), rank(r) {
    for (size_t p = 0; p < sizes.size(); ++p) {
      params.emplace_back(sizes[p], float(rank * 100 + p));
      grads.emplace_back(sizes[p], 0.f);
      if (!device.is_cpu()) {
        ext_params.push_back(Upload(params[p], device));
        ext_grads.push_back(Upload(grads[p], device));
      }
    }
  }
  static ExtTensor Upload(const std::vector<float>& v, Device d) {
    auto t = ToDevice(v.data(), v.size(), DataType::kFloat32, d);
    RequireOk(t.status(), "upload to " + d.ToString());
    return *std::move(t);
  }
  TensorRef Param(int p) {
    return !device.is_cpu() ? ext_params[p].ref
                            : TensorRef(params[p].data(), params[p].size(),
                                        DataType::kFloat32);
  }
  TensorRef Grad(int p) {
    return !device.is_cpu() ? ext_grads[p].ref
                            : TensorRef(grads[p].data(), grads[p].size(),
                                        DataType::kFloat32);
  }
  std::vector<GradReducer::Parameter> Params() {
    std::vector<GradReducer::Parameter> out;
    for (size_t p = 0; p < params.size(); ++p)
      out.push_back({Param(p), absl::StrCat("layer", p, ".weight")});
    return out;
  }
  // This rank's gradient of parameter p in iteration it.
  void Fill(int it, int p) {
    for (size_t k = 0; k < grads[p].size(); ++k)
      grads[p][k] = GradValue(rank, p, k, it);
    if (!device.is_cpu()) {
      RequireOk(CopyBytes(ext_grads[p].ref.data(), device, grads[p].data(),
                          Device::Cpu(), grads[p].size() * sizeof(float)),
                "fill");
    }
  }
  // Host mirrors from the device.
  void Sync() {
    if (device.is_cpu()) return;
    for (size_t p = 0; p < params.size(); ++p) {
      RequireOk(FromExtension(ext_params[p].ref, params[p].data()),
                "read param");
      RequireOk(FromExtension(ext_grads[p].ref, grads[p].data()), "read grad");
    }
  }
};

// Gradient p of `m` is iteration it's mean over `size` ranks, within `tol`
// (relative beyond 1).
inline void RequireMeanGrad(GradReducerTestModel& m, int p, int it, int size,
                            double tol, const std::string& what) {
  m.Sync();
  for (size_t k = 0; k < m.grads[p].size(); ++k) {
    const double want = MeanGradValue(p, k, it, size);
    if (std::abs(m.grads[p][k] - want) > tol * std::max(1.0, std::abs(want))) {
      Require(false, absl::StrCat(what, ": param ", p, "[", k,
                                  "] = ", m.grads[p][k], ", want ", want));
    }
  }
}

// One iteration (0) of a reducer over `m` with the compression `hook`, the
// gradients handed over last to first: every average is the hook's
// (CompressedMeanGradValue over `size` ranks). `where` ends the failure
// messages.
inline void RequireHookAverages(const std::shared_ptr<ProcessGroup>& world,
                                GradReducerTestModel& m, CommHook hook,
                                int size, absl::string_view where) {
  GradReducer::Options o;
  o.comm_hook = hook;
  auto r = GradReducer::Create(world, m.Params(), {}, o);
  RequireOk(r.status(), absl::StrCat("create hook", where));
  for (int p = static_cast<int>(m.grads.size()) - 1; p >= 0; --p) {
    m.Fill(0, p);
    RequireOk((*r)->MarkReady(p, m.Grad(p)), absl::StrCat("ready hook", where));
  }
  RequireOk((*r)->Finalize(), absl::StrCat("finalize hook", where));
  m.Sync();
  for (size_t p = 0; p < m.grads.size(); ++p) {
    for (size_t k = 0; k < m.grads[p].size(); ++k) {
      // Each rank's value rounded to the compressed type and divided there.
      const double want = CompressedMeanGradValue(hook, p, k, 0, size);
      const double tol = CompressedTolerance(hook, want, size);
      Require(std::abs(m.grads[p][k] - want) <= tol,
              absl::StrCat(CompressedTypeName(hook), " hook", where, ": ",
                           m.grads[p][k], " want ", want));
    }
  }
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_CC_PARALLEL_GRAD_REDUCER_TEST_MODEL_H_
