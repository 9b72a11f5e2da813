// FlatShard (FSDP's engine) with its parameters off the host (issue 13), on
// any machine: the extension device of testing/cc/extension_device.h stands
// in for a GPU (its bytes kept transformed, so a host read of device memory
// gives wrong values), and "ext_test" for NCCL (its comm device is ext:0 and
// it refuses host tensors, so host metadata must be staged).
//
//   flat_shard_devices_multirank_test ext_test   every strategy, offload, mixed
//                                       precision, state dicts, on ext:0
//   flat_shard_devices_multirank_test nccl       the same on CUDA over NCCL (a
//                                       GPU, or the CUDA + NCCL simulator),
//                                       and gradients made on the caller's
//                                       own stream (SetCudaStream)
//   flat_shard_devices_multirank_test gloo       parameters on ext:0 over a
//   host group:
//                                       refused on every rank, naming both
//
// Expected values are computed by each rank from formulas of (rank, index),
// at world sizes 1-4.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/dist_api/dist.h"
#include "cc/parallel/devices_job_test_util.h"
#include "cc/parallel/flat_shard.h"
#include "testing/cc/caller_stream.h"
#include "testing/cc/devices_job.h"
#include "testing/cc/extension_device.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace {

using ::distkit::testing::ExtTensor;

int rank_ = 0, size_ = 1;
// Where the parameters live: ext:0, or an nccl group's CUDA device.
Device device_ = Device::Ext(0);
const std::vector<int64_t> kSizes = {10, 33, 7};

double Init(int r, int p, int64_t k) { return 0.5 * p + 0.01 * k + r; }
double G(int r, int p, int64_t k) { return 0.25 * (r + 1) * ((k % 5) - 2) + p; }
double MeanG(int p, int64_t k) {
  double s = 0;
  for (int r = 0; r < size_; ++r) s += G(r, p, k) / size_;
  return s;
}

ExtTensor Upload(const std::vector<float>& v) {
  auto t = ::distkit::testing::ToDevice(v.data(), v.size(), DataType::kFloat32,
                                        device_);
  testing::RequireOk(t.status(), "upload");
  return *std::move(t);
}

std::vector<float> Read(const TensorRef& t) {
  std::vector<float> out(t.numel());
  if (t.dtype() == DataType::kFloat32) {
    testing::RequireOk(
        CopyBytes(out.data(), Device::Cpu(), t.data(), t.device(), t.nbytes()),
        "read");
  } else {  // bfloat16 full parameters: widen on the host
    std::vector<uint16_t> half(t.numel());
    testing::RequireOk(
        CopyBytes(half.data(), Device::Cpu(), t.data(), t.device(), t.nbytes()),
        "read bf16");
    for (size_t i = 0; i < half.size(); ++i) {
      uint32_t bits = uint32_t{half[i]} << 16;
      std::memcpy(&out[i], &bits, 4);
    }
  }
  return out;
}

void Close(const std::vector<float>& got, const std::vector<double>& want,
           double tol, const std::string& what) {
  testing::Require(got.size() == want.size(), what + ": size");
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::abs(got[k] - want[k]) > tol * std::max(1.0, std::abs(want[k]))) {
      testing::Require(false, absl::StrCat(what, "[", k, "] = ", got[k],
                                           ", want ", want[k]));
    }
  }
}

void Unit(std::shared_ptr<ProcessGroup> world, ShardingStrategy strategy,
          bool offload, bool bf16) {
  const std::string what =
      absl::StrCat(ShardingStrategyName(strategy), offload ? " offload" : "",
                   bf16 ? " bf16" : "", " on ext:0");
  std::vector<ExtTensor> init;
  std::vector<FlatShard::Parameter> params;
  for (size_t p = 0; p < kSizes.size(); ++p) {
    std::vector<float> v(kSizes[p]);
    for (int64_t k = 0; k < kSizes[p]; ++k) v[k] = Init(rank_, p, k);
    init.push_back(Upload(v));
    params.push_back({init.back().ref, absl::StrCat("w", p)});
  }
  FlatShard::Options o;
  o.strategy = strategy;
  o.offload_params = offload;
  o.sync_module_states = true;  // rank 0's values everywhere
  if (bf16) o.param_dtype = DataType::kBFloat16;
  auto unit = FlatShard::Create(world, params, o);
  testing::RequireOk(unit.status(), "create " + what);
  const double tol = bf16 ? 1e-2 : 1e-6;
  for (int it = 0; it < 2; ++it) {
    testing::RequireOk((*unit)->Unshard(), "unshard " + what);
    for (size_t p = 0; p < kSizes.size(); ++p) {
      auto full = (*unit)->FullParam(p);
      testing::RequireOk(full.status(), "full param");
      std::vector<double> want(kSizes[p]);
      for (int64_t k = 0; k < kSizes[p]; ++k) want[k] = Init(0, p, k);
      if (it == 0) Close(Read(*full), want, tol, what + ": full param");
    }
    std::vector<ExtTensor> grads;
    for (size_t p = 0; p < kSizes.size(); ++p) {
      std::vector<float> g(kSizes[p]);
      for (int64_t k = 0; k < kSizes[p]; ++k) g[k] = G(rank_, p, k);
      grads.push_back(Upload(g));
      testing::RequireOk((*unit)->AccumulateGrad(p, grads.back().ref),
                         "accumulate " + what);
    }
    testing::RequireOk((*unit)->ReduceScatterGrads(), "reduce " + what);
    testing::RequireOk((*unit)->Reshard(), "reshard " + what);
    // This rank's pieces of the averaged gradients (accumulated twice by
    // the second iteration).
    for (size_t p = 0; p < kSizes.size(); ++p) {
      FlatShard::LocalPiece piece = (*unit)->Piece(p);
      if (piece.numel == 0) continue;
      testing::Require(
          piece.grad.device() == (offload ? Device::Cpu() : device_),
          what + ": the shard gradient's device");
      std::vector<double> want(piece.numel);
      for (int64_t k = 0; k < piece.numel; ++k) {
        want[k] = (it + 1) * MeanG(p, piece.param_offset + k);
      }
      Close(Read(piece.grad), want, bf16 ? 3e-2 : 1e-5, what + ": shard grad");
    }
  }
  // Full state dict into host buffers, then a rank-0 load and back.
  std::vector<std::vector<float>> outs;
  std::vector<TensorRef> refs;
  for (int64_t n : kSizes) outs.emplace_back(n, -1.0f);
  for (auto& v : outs)
    refs.push_back(TensorRef(v.data(), v.size(), DataType::kFloat32));
  testing::RequireOk((*unit)->GatherFullParams(refs), "gather full " + what);
  for (size_t p = 0; p < kSizes.size(); ++p) {
    std::vector<double> want(kSizes[p]);
    for (int64_t k = 0; k < kSizes[p]; ++k) want[k] = Init(0, p, k);
    Close(outs[p], want, 1e-6, what + ": full state dict");
  }
  std::vector<ExtTensor> loads;
  std::vector<TensorRef> values;
  for (size_t p = 0; p < kSizes.size(); ++p) {
    std::vector<float> v(kSizes[p], float(7 + p + rank_));
    loads.push_back(Upload(v));
    values.push_back(loads.back().ref);
  }
  testing::RequireOk((*unit)->LoadFullParams(values, /*rank0_only=*/true),
                     "load rank 0's " + what);
  testing::RequireOk((*unit)->GatherFullParams(refs, /*rank0_only=*/true),
                     "gather rank 0");
  if (rank_ == 0) {
    for (size_t p = 0; p < kSizes.size(); ++p) {
      Close(outs[p], std::vector<double>(kSizes[p], 7.0 + p), 1e-6,
            what + ": rank 0's loaded values");
    }
  }
}

// The caller's stream (issue 35): each gradient is written on the caller's
// non-blocking stream after a long stretch of device work there (the
// simulator's dksimStreamSleep) and handed over at once, one through
// AccumulateGrad (staged to the host for the add) and one straight into the
// FullGrad view (divided on the host before the reduce-scatter). Every copy
// must follow that stream (one on the legacy stream or a private one reads
// the old gradient, every time); the shard gradients are read there after.
void CallerStreamOrder(std::shared_ptr<ProcessGroup> world) {
  auto stream = testing::CallerStream::Create(world);
  testing::RequireOk(stream.status(), "a caller's stream");
  std::vector<ExtTensor> init, grads;
  std::vector<FlatShard::Parameter> params;
  for (size_t p = 0; p < kSizes.size(); ++p) {
    std::vector<float> v(kSizes[p]);
    for (int64_t k = 0; k < kSizes[p]; ++k) v[k] = Init(rank_, p, k);
    init.push_back(Upload(v));
    grads.push_back(Upload(std::vector<float>(kSizes[p], 0.f)));
    params.push_back({init.back().ref, absl::StrCat("w", p)});
  }
  FlatShard::Options o;
  o.strategy = ShardingStrategy::kFullShard;
  o.sync_module_states = true;
  auto unit = FlatShard::Create(world, params, o);
  testing::RequireOk(unit.status(), "create on the caller's stream");
  constexpr long kWorkUs = 100000;
  bool slept = true;
  for (int it = 0; it < 2; ++it) {
    testing::RequireOk((*unit)->Unshard(), "unshard on the caller's stream");
    for (size_t p = 0; p < kSizes.size(); ++p) {
      std::vector<float> g(kSizes[p]);
      for (int64_t k = 0; k < kSizes[p]; ++k) g[k] = G(rank_, p, k);
      slept = (*stream)->Sleep(kWorkUs) && slept;
      if (p == 1) {
        auto view = (*unit)->FullGrad(p);
        testing::RequireOk(view.status(), "full grad view");
        testing::RequireOk(
            (*stream)->Write(view->data(), g.data(), view->nbytes()),
            "backward into the view on the caller's stream");
        continue;
      }
      testing::RequireOk((*stream)->Write(grads[p].ref.data(), g.data(),
                                          g.size() * sizeof(float)),
                         "backward on the caller's stream");
      testing::RequireOk((*unit)->AccumulateGrad(p, grads[p].ref),
                         "accumulate on the caller's stream");
    }
    testing::RequireOk((*unit)->ReduceScatterGrads(),
                       "reduce on the caller's stream");
    testing::RequireOk((*unit)->Reshard(), "reshard on the caller's stream");
    for (size_t p = 0; p < kSizes.size(); ++p) {
      FlatShard::LocalPiece piece = (*unit)->Piece(p);
      if (piece.numel == 0) continue;
      std::vector<float> got(piece.numel);
      testing::RequireOk((*stream)->Read(got.data(), piece.grad.data(),
                                         got.size() * sizeof(float)),
                         "read on the caller's stream");
      std::vector<double> want(piece.numel);
      for (int64_t k = 0; k < piece.numel; ++k) {
        want[k] = (it + 1) * MeanG(p, piece.param_offset + k);
      }
      Close(got, want, 1e-5,
            absl::StrCat("iteration ", it, ", param ", p,
                         ": shard grad (a copy off the caller's stream)"));
    }
  }
  std::printf("FlatShard on the caller's stream: 2 iterations, %s\n",
              slept ? "gradients written after 100 ms of device work each"
                    : "no device sleep available");
}

// The checks on the job's backend.
void RunChecks(const testing::DevicesJob& job) {
  rank_ = job.rank;
  size_ = job.size;
  device_ = job.device;
  if (job.backend != "gloo") {
    for (ShardingStrategy s :
         {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
          ShardingStrategy::kNoShard}) {
      Unit(job.world, s, /*offload=*/false, /*bf16=*/false);
    }
    Unit(job.world, ShardingStrategy::kFullShard, /*offload=*/true, false);
    Unit(job.world, ShardingStrategy::kFullShard, false, /*bf16=*/true);
    if (job.backend == "nccl") CallerStreamOrder(job.world);
  } else {
    auto p = ::distkit::testing::ToExtension(std::vector<float>(4).data(), 4,
                                             DataType::kFloat32);
    testing::RequireOk(p.status(), "upload");
    auto unit = FlatShard::Create(job.world, {{p->ref, "w"}}, {});
    testing::Require(
        absl::IsInvalidArgument(unit.status()) &&
            absl::StrContains(unit.status().message(), "communicates on cpu"),
        "parameters off the group's comm device refused on every rank: " +
            unit.status().ToString());
  }
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  return distkit::testing::RunDevicesJob(argc, argv, "FlatShard on devices",
                                         distkit::RunChecks);
}
