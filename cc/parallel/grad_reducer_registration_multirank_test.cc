// GradReducer::Create when the ranks do not register the same model (a model
// built differently on one rank): a parameter of another size, another
// count, another dtype, a differing buffer, different options, and a problem
// only one rank has. Every rank must get the same INVALID_ARGUMENT
// naming the rank, the parameter and both descriptions, at once (not after
// an op timeout), and the group must still work afterwards; identical
// registrations still train, and so do registrations that differ only in
// shape (a flat array, as Rust's and Go's reducers register, beside a shaped
// tensor). With "ext_test" or "nccl" the group's comm
// device is not the host, so the check's host integers are staged.
//
//   grad_reducer_registration_multirank_test [gloo|ext_test|nccl]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/core/device_staging.h"
#include "cc/dist_api/dist.h"
#include "cc/parallel/devices_job_test_util.h"
#include "cc/parallel/grad_reducer.h"
#include "testing/cc/devices_job.h"
#include "testing/cc/extension_device.h"
#include "testing/cc/grad_reducer_values.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace {

using testing::Check;
using testing::CheckOk;

int rank_ = 0, size_ = 1, last_ = 0;
Device device_ = Device::Ext(0);

// Host parameters of the given shapes and dtypes (float32 unless named),
// named layer<p>.weight, and host buffers of the given sizes.
struct Model {
  struct Spec {
    std::vector<int64_t> shape;
    DataType dtype = DataType::kFloat32;
  };
  std::vector<Spec> specs;
  std::vector<std::vector<double>> storage;  // room for any dtype
  std::vector<std::vector<float>> buffers;

  Model(std::vector<Spec> s, std::vector<int64_t> buffer_sizes)
      : specs(std::move(s)) {
    for (const Spec& spec : specs) {
      int64_t numel = 1;
      for (int64_t d : spec.shape) numel *= d;
      storage.emplace_back(numel, 0.0);
    }
    for (int64_t n : buffer_sizes) buffers.emplace_back(n, float(rank_));
  }
  std::vector<GradReducer::Parameter> Params() {
    std::vector<GradReducer::Parameter> out;
    for (size_t p = 0; p < specs.size(); ++p) {
      out.push_back(
          {TensorRef(storage[p].data(), specs[p].shape, specs[p].dtype),
           absl::StrCat("layer", p, ".weight")});
    }
    return out;
  }
  std::vector<TensorRef> Buffers() {
    std::vector<TensorRef> out;
    for (auto& b : buffers)
      out.push_back(TensorRef(b.data(), b.size(), DataType::kFloat32));
    return out;
  }
};

// The model every rank agrees on: three parameters, one buffer.
std::vector<Model::Spec> Agreed() { return {{{4, 3}}, {{16, 8}}, {{10}}}; }

// The group still pairs collectives right: an all_reduce of rank + 1.
void CheckGroupWorks(ProcessGroup& world, const std::string& what) {
  std::vector<float> v(5, float(rank_ + 1));
  CheckOk(OnCommDevice(TensorRef(v.data(), 5, DataType::kFloat32),
                       world.comm_device(), Access::kReadWrite,
                       [&](const TensorRef& t) {
                         return world.AllReduce(t, ReduceOp::kSum);
                       }),
          what + ": all_reduce afterwards");
  const float want = size_ * (size_ + 1) / 2.0f;
  Check(v[0] == want && v[4] == want,
        absl::StrCat(what, ": all_reduce afterwards gave ", v[0], ", want ",
                     want));
}

// Create on every rank (each with its own model) must fail alike, with
// every one of `parts` in the message, well before any op timeout.
void ExpectRefused(std::shared_ptr<ProcessGroup> world, const std::string& what,
                   Model& model, const GradReducer::Options& options,
                   const std::vector<std::string>& parts,
                   std::vector<GradReducer::Parameter> params = {}) {
  if (params.empty()) params = model.Params();
  const absl::Time start = absl::Now();
  auto r =
      GradReducer::Create(world, std::move(params), model.Buffers(), options);
  const absl::Duration took = absl::Now() - start;
  bool has_parts = true;
  for (const std::string& part : parts)
    has_parts = has_parts && absl::StrContains(r.status().message(), part);
  Check(absl::IsInvalidArgument(r.status()) && has_parts,
        absl::StrCat(what, ": expected INVALID_ARGUMENT with '",
                     absl::StrJoin(parts, "', '"), "', got ",
                     r.status().ToString()));
  Check(took < absl::Seconds(10),
        absl::StrCat(what, ": refused after ", absl::FormatDuration(took)));
  if (rank_ == 0 && !r.ok()) {
    std::printf("%s: %s\n", what.c_str(), r.status().ToString().c_str());
  }
  // The same message on every rank: max(hash) and max(~hash) = ~min(hash).
  uint64_t hash = 14695981039346656037ULL;  // FNV-1a
  for (char c : r.status().message())
    hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  const int64_t mine = static_cast<int64_t>(hash);
  int64_t minmax[2] = {mine, ~mine};
  CheckOk(OnCommDevice(TensorRef(minmax, 2, DataType::kInt64),
                       world->comm_device(), Access::kReadWrite,
                       [&](const TensorRef& t) {
                         return world->AllReduce(t, ReduceOp::kMax);
                       }),
          what + ": comparing messages");
  Check(minmax[0] == mine && ~minmax[1] == mine,
        absl::StrCat(what, ": the ranks' messages differ"));
  CheckGroupWorks(*world, what);
}

void Mismatches(std::shared_ptr<ProcessGroup> world) {
  const std::string last = absl::StrCat("rank ", last_);
  // (a) Another size on the last rank.
  {
    std::vector<Model::Spec> specs = Agreed();
    if (rank_ == last_) specs[1].shape = {8, 17};
    Model m(specs, {4});
    ExpectRefused(
        world, "size", m, {},
        {last + "'s parameter 1 (layer1.weight) is float32 x136",
         "while rank 0's is float32 x128", "same model across all ranks"});
  }
  // The odd one out is rank 0: the first other rank is named.
  {
    std::vector<Model::Spec> specs = Agreed();
    if (rank_ == 0) specs[0].shape = {3, 5};
    Model m(specs, {4});
    ExpectRefused(world, "size on rank 0", m, {},
                  {"rank 1's parameter 0 (layer0.weight) is float32 x12",
                   "while rank 0's is float32 x15"});
  }
  // (b) Every rank but 0 has one parameter fewer.
  {
    std::vector<Model::Spec> specs = Agreed();
    if (rank_ != 0) specs.pop_back();
    Model m(specs, {4});
    ExpectRefused(world, "count", m, {},
                  {"rank 1 has 2 parameters, while rank 0 has 3"});
  }
  // (c) Another dtype on the last rank, floating point or not.
  for (DataType dtype : {DataType::kFloat64, DataType::kInt32}) {
    std::vector<Model::Spec> specs = Agreed();
    if (rank_ == last_) specs[2].dtype = dtype;
    Model m(specs, {4});
    ExpectRefused(world, absl::StrCat("dtype ", DataTypeName(dtype)), m, {},
                  {absl::StrCat(last, "'s parameter 2 (layer2.weight) is ",
                                DataTypeName(dtype), " x10"),
                   "while rank 0's is float32 x10"});
  }
  // (d) A buffer of another size, and another number of buffers.
  {
    Model m(Agreed(), {rank_ == last_ ? 5 : 4});
    ExpectRefused(
        world, "buffer size", m, {},
        {last + "'s buffer 0 is float32 x5", "while rank 0's is float32 x4"});
  }
  {
    std::vector<int64_t> buffers = {4};
    if (rank_ == last_) buffers.push_back(2);
    Model m(Agreed(), buffers);
    ExpectRefused(world, "buffer count", m, {},
                  {last + " has 2 buffers, while rank 0 has 1"});
  }
  // Options that decide the buckets and the collectives.
  {
    Model m(Agreed(), {4});
    GradReducer::Options o;
    if (rank_ == last_) o.bucket_cap_mb = 10;
    ExpectRefused(world, "bucket_cap_mb", m, o,
                  {last + " has bucket_cap_mb 10, while rank 0 has "
                          "bucket_cap_mb 25"});
  }
  {
    Model m(Agreed(), {4});
    GradReducer::Options o;
    if (rank_ == last_) o.find_unused_parameters = true;
    ExpectRefused(world, "find_unused_parameters", m, o,
                  {last + " has find_unused_parameters true, while rank 0 "
                          "has find_unused_parameters false"});
  }
  // A problem of the last rank's own (parameters on two devices): the
  // others do not wait for it in a collective.
  {
    Model m(Agreed(), {4});
    std::vector<GradReducer::Parameter> params = m.Params();
    std::vector<float> host(12, 0.f);
    absl::StatusOr<testing::ExtTensor> ext =
        testing::ToDevice(host.data(), 12, DataType::kFloat32, device_);
    testing::RequireOk(ext.status(), "a tensor on the device");
    if (rank_ == last_) {
      params[0].data = TensorRef(ext->ref.data(), {4, 3}, DataType::kFloat32,
                                 ext->ref.device());
    }
    ExpectRefused(world, "several devices on one rank", m, {},
                  {"several devices", absl::StrCat("(", last, ")")}, params);
  }
}

// (e) The same registration on every rank still builds and averages; with
// `flat_on_last`, the last rank registers parameter 1 as a flat array of the
// same elements, as a Rust or Go rank would.
void Agreeing(std::shared_ptr<ProcessGroup> world, bool flat_on_last) {
  std::vector<Model::Spec> specs = Agreed();
  if (flat_on_last && rank_ == last_) specs[1].shape = {128};
  Model m(specs, {4});
  const absl::Time start = absl::Now();
  auto r = GradReducer::Create(world, m.Params(), m.Buffers(), {});
  const absl::Duration took = absl::Now() - start;
  testing::RequireOk(r.status(), "create with the same model");
  if (rank_ == 0) {
    std::printf("Create with agreeing ranks: %s\n",
                absl::FormatDuration(took).c_str());
  }
  Check(m.buffers[0][3] == 0.f, "buffers broadcast from rank 0");
  std::vector<std::vector<float>> grads;
  for (const Model::Spec& s : m.specs) {
    int64_t numel = 1;
    for (int64_t d : s.shape) numel *= d;
    grads.emplace_back(numel);
  }
  for (int p = 2; p >= 0; --p) {
    for (size_t k = 0; k < grads[p].size(); ++k)
      grads[p][k] = testing::GradValue(rank_, p, k, 0);
    CheckOk((*r)->MarkReady(p, TensorRef(grads[p].data(), grads[p].size(),
                                         DataType::kFloat32)),
            "mark ready");
  }
  CheckOk((*r)->Finalize(), "finalize");
  for (int p = 0; p < 3; ++p) {
    for (size_t k = 0; k < grads[p].size(); ++k) {
      const double want = testing::MeanGradValue(p, k, 0, size_);
      if (std::abs(grads[p][k] - want) > 1e-6 * std::max(1.0, std::abs(want))) {
        Check(false, absl::StrCat("agreeing: param ", p, "[", k,
                                  "] = ", grads[p][k], ", want ", want));
        break;
      }
    }
  }
}

// What construction costs with agreeing ranks (printed, not checked): 161
// small parameters (as many as ResNet-50's) and no buffers, the median of
// 21 constructions.
void ConstructionCost(std::shared_ptr<ProcessGroup> world) {
  std::vector<Model::Spec> specs(161, Model::Spec{{8, 4}});
  Model m(specs, {});
  std::vector<absl::Duration> took;
  for (int i = 0; i < 21; ++i) {
    const absl::Time start = absl::Now();
    auto r = GradReducer::Create(world, m.Params(), {}, {});
    took.push_back(absl::Now() - start);
    CheckOk(r.status(), "create 161 parameters");
  }
  std::sort(took.begin(), took.end());
  if (rank_ == 0) {
    std::printf("Create with 161 parameters (%s): median %s\n",
                world->comm_device().ToString().c_str(),
                absl::FormatDuration(took[took.size() / 2]).c_str());
  }
}

// The checks on the job's backend.
void RunChecks(const testing::DevicesJob& job) {
  rank_ = job.rank;
  size_ = job.size;
  last_ = size_ - 1;
  device_ = job.device;
  if (size_ > 1) Mismatches(job.world);
  Agreeing(job.world, /*flat_on_last=*/false);
  Agreeing(job.world, /*flat_on_last=*/true);
  ConstructionCost(job.world);
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  return distkit::testing::RunDevicesJob(
      argc, argv, "GradReducer registration check", distkit::RunChecks);
}
