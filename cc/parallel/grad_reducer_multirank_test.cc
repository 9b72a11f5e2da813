// Runs GradReducer in every rank of a real job (through the harness) and
// checks every averaged gradient against the mean each rank computes itself
// from the formula all ranks use: bucketing and rebuilds, parameter and
// buffer broadcast, find_unused_parameters, the unused-parameter error,
// no_sync accumulation, gradient_as_bucket_view, the fp16 / bf16 hooks.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/dist_api/dist.h"
#include "cc/parallel/grad_reducer.h"
#include "cc/parallel/grad_reducer_test_model.h"
#include "testing/cc/grad_reducer_values.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace {

int rank_ = 0, size_ = 1;

// Parameters and gradients on the host.
using Model = testing::GradReducerTestModel;

void Basics(std::shared_ptr<ProcessGroup> world) {
  // Sizes that make several buckets with tiny caps (first 2 KiB, then 8 KiB).
  Model m(Device::Cpu(), rank_, {100, 3000, 7, 1500, 2048, 1});
  std::vector<float> buffer(10, float(rank_));
  GradReducer::Options o;
  o.first_bucket_cap_mb = 2048.0 / (1 << 20);
  o.bucket_cap_mb = 8192.0 / (1 << 20);
  auto r = GradReducer::Create(
      world, m.Params(), {TensorRef(buffer.data(), 10, DataType::kFloat32)}, o);
  testing::RequireOk(r.status(), "create");
  for (auto& p : m.params)
    for (float v : p)
      testing::Require(v == float(&p - &m.params[0]),
                       "params broadcast from rank 0");
  testing::Require(buffer[3] == 0.f, "buffers broadcast from rank 0");
  testing::Require((*r)->buckets().size() >= 3, "several buckets");
  testing::Require((*r)->buckets()[0] == std::vector<int>{5, 4},
                   "first bucket: the last parameters");
  for (int it = 0; it < 4; ++it) {
    // Gradients arrive out of the registration order; the rebuild after
    // iteration 0 follows it (rank 0's), later iterations use yet another.
    std::vector<int> order = it < 2 ? std::vector<int>{2, 5, 0, 4, 1, 3}
                                    : std::vector<int>{5, 4, 3, 2, 1, 0};
    for (int p : order) {
      m.Fill(it, p);
      testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "mark ready");
    }
    testing::RequireOk((*r)->Finalize(), "finalize");
    for (int p = 0; p < 6; ++p)
      testing::RequireMeanGrad(m, p, it, size_, 1e-6, "basic");
    if (it == 0) {
      testing::Require((*r)->buckets()[0][0] == 2, "rebuilt in ready order");
    }
  }
  auto trace = (*r)->last_trace();
  testing::Require(trace.buckets.size() == (*r)->buckets().size(),
                   "trace per bucket");
  buffer.assign(10, float(rank_ + 5));
  testing::RequireOk((*r)->BroadcastBuffers(), "broadcast buffers");
  testing::Require(buffer[9] == 5.f, "buffers follow rank 0");
  // Misuse: wrong gradient size, index out of range, twice ready.
  std::vector<float> wrong(3);
  testing::Require(
      (*r)->MarkReady(0, TensorRef(wrong.data(), 3, DataType::kFloat32))
              .code() == absl::StatusCode::kInvalidArgument,
      "wrong size refused");
  testing::Require(
      (*r)->MarkReady(9, m.Grad(0)).code() == absl::StatusCode::kOutOfRange,
      "index");
  for (int p = 0; p < 6; ++p)
    testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "ready");
  testing::Require((*r)->MarkReady(0, m.Grad(0)).code() ==
                       absl::StatusCode::kFailedPrecondition,
                   "twice ready refused");
  testing::RequireOk((*r)->Finalize(), "finalize");
}

void UnusedParameters(std::shared_ptr<ProcessGroup> world) {
  Model m(Device::Cpu(), rank_, {50, 60, 70, 80});
  // Without find_unused_parameters, a parameter without gradient is an error
  // naming it, on every rank, and the next iteration works.
  {
    auto r = GradReducer::Create(world, m.Params(), {}, {});
    testing::RequireOk(r.status(), "create");
    for (int p : {3, 2, 0}) {
      m.Fill(0, p);
      testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "ready");
    }
    absl::Status s = (*r)->Finalize();
    testing::Require(
        s.code() == absl::StatusCode::kFailedPrecondition &&
            s.message().find("layer1.weight") != std::string::npos &&
            s.message().find("find_unused_parameters") != std::string::npos,
        "missing gradient error: " + s.ToString());
    for (int p : {3, 2, 1, 0}) {
      m.Fill(1, p);
      testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "ready");
    }
    testing::RequireOk((*r)->Finalize(), "finalize after error");
    for (int p = 0; p < 4; ++p)
      testing::RequireMeanGrad(m, p, 1, size_, 1e-6, "after error");
  }
  // With it: parameter 1 unused on rank 0 only (zero contribution there),
  // parameter 3 unused everywhere (its gradient is not touched).
  GradReducer::Options o;
  o.find_unused_parameters = true;
  auto r = GradReducer::Create(world, m.Params(), {}, o);
  testing::RequireOk(r.status(), "create");
  std::vector<int> unused = {3};
  if (rank_ == 0) unused.push_back(1);
  testing::RequireOk((*r)->PrepareForBackward(unused), "prepare");
  m.grads[3].assign(80, -7.f);
  for (int p : {2, 1, 0}) {
    if (p == 1 && rank_ == 0) continue;
    m.Fill(0, p);
    testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "ready");
  }
  testing::RequireOk((*r)->Finalize(), "finalize");
  testing::RequireMeanGrad(m, 0, 0, size_, 1e-6, "used");
  testing::RequireMeanGrad(m, 2, 0, size_, 1e-6, "used");
  testing::Require(m.grads[3][0] == -7.f && !(*r)->globally_used(3),
                   "unused everywhere untouched");
  testing::Require((*r)->globally_used(1) == (size_ > 1),
                   "used by the ranks other than 0");
  auto g1 = (*r)->ReducedGrad(1);
  testing::RequireOk(g1.status(), "reduced grad");
  for (int64_t k = 0; k < 60; ++k) {
    double want = 0;
    for (int q = 1; q < size_; ++q)
      want += testing::GradValue(q, 1, k, 0) / size_;
    testing::Require(std::abs(g1->data<float>()[k] - want) <
                         1e-6 * std::max(1.0, std::abs(want)),
                     "partly unused parameter averages zeros in");
  }
}

void NoSyncAndViews(std::shared_ptr<ProcessGroup> world) {
  Model m(Device::Cpu(), rank_, {300, 40});
  auto r = GradReducer::Create(world, m.Params(), {}, {});
  testing::RequireOk(r.status(), "create");
  // no_sync: two local accumulations, then one synchronized step.
  (*r)->set_require_sync(false);
  for (int p : {1, 0}) {
    m.Fill(0, p);
    testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "no-sync ready");
  }
  testing::RequireOk((*r)->Finalize(), "no-sync finalize");
  testing::Require(m.grads[0][1] == float(testing::GradValue(rank_, 0, 1, 0)),
                   "no_sync leaves gradients local");
  (*r)->set_require_sync(true);
  for (int p : {1, 0}) {
    for (size_t k = 0; k < m.grads[p].size(); ++k)
      m.grads[p][k] += testing::GradValue(rank_, p, k, 1);
    testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "ready");
  }
  testing::RequireOk((*r)->Finalize(), "finalize");
  for (int p = 0; p < 2; ++p)
    for (size_t k = 0; k < m.grads[p].size(); ++k)
      testing::Require(
          std::abs(m.grads[p][k] - (testing::MeanGradValue(p, k, 0, size_) +
                                    testing::MeanGradValue(p, k, 1, size_))) <
              1e-5,
          "accumulated gradients averaged");

  // gradient_as_bucket_view: backward writes into the views; no copies.
  GradReducer::Options o;
  o.gradient_as_bucket_view = true;
  o.first_bucket_cap_mb = 100.0 / (1 << 20);
  auto v = GradReducer::Create(world, m.Params(), {}, o);
  testing::RequireOk(v.status(), "create views");
  for (int it = 0; it < 3; ++it) {
    for (int p : {0, 1}) {  // not reverse: the rebuild moves the views
      auto view = (*v)->GradView(p);
      testing::RequireOk(view.status(), "view");
      for (int64_t k = 0; k < view->numel(); ++k)
        view->data<float>()[k] = testing::GradValue(rank_, p, k, it);
      testing::RequireOk((*v)->MarkReady(p, *view), "ready view");
    }
    const int64_t gen = (*v)->view_generation();
    testing::RequireOk((*v)->Finalize(), "finalize views");
    for (int p : {0, 1}) {
      auto view = (*v)->GradView(p);
      for (int64_t k = 0; k < view->numel(); ++k) {
        testing::Require(
            std::abs(view->data<float>()[k] -
                     testing::MeanGradValue(p, k, it, size_)) < 1e-6,
            "view averaged");
      }
    }
    if (it == 0)
      testing::Require((*v)->view_generation() == gen + 1,
                       "views moved by the rebuild");
  }
}

void Hooks(std::shared_ptr<ProcessGroup> world) {
  for (CommHook hook : {CommHook::kFp16Compress, CommHook::kBf16Compress}) {
    Model m(Device::Cpu(), rank_, {257, 33});
    testing::RequireHookAverages(world, m, hook, size_, "");
    for (int p = 0; p < 2; ++p) {
      for (size_t k = 0; k < m.grads[p].size(); ++k) {
        const double tol = testing::CompressedTolerance(
            hook, testing::CompressedMeanGradValue(hook, p, k, 0, size_),
            size_);
        testing::Require(
            std::abs(m.grads[p][k] - testing::MeanGradValue(p, k, 0, size_)) <=
                4 * tol,
            "hook close to the mean");
      }
    }
  }
}

}  // namespace
}  // namespace distkit

int main() {
  using namespace distkit;
  distkit::dist::InitOptions options;
  if (!dist::InitDist("pytorch").ok()) return 2;
  rank_ = dist::GetRank();
  testing::SetCheckRank(rank_);
  size_ = dist::GetWorldSize();
  auto world = dist::GetDefaultGroup();
  Basics(world);
  UnusedParameters(world);
  NoSyncAndViews(world);
  Hooks(world);
  testing::RequireOk(dist::Barrier(), "barrier");
  std::printf("rank %d/%d: GradReducer checks passed\n", rank_, size_);
  dist::DestroyDist();
  return 0;
}
