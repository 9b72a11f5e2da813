// FullyShardedDataParallel (LibTorch) after failures, at 2 ranks (Gloo):
//   - a backward that throws on every rank after the head's gradient landed
//     in the root unit's full gradient: the next step trains as if the
//     failed one never ran (its partial gradients are not added in);
//   - LoadShardedCheckpoint with shard_rank1.pt missing or corrupt (read by
//     rank 1 alone): an error on every rank, and every rank's shards,
//     parameters and buffers as before the call;
//   - a checkpoint's metadata whose counts would overflow: INVALID_ARGUMENT.
#include <torch/autograd.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/fsdp_checkpoint_file.h"
#include "cc/torch/fully_sharded_data_parallel.h"
#include "cc/torch/seed_parameters_test_util.h"
#include "cc/torch/torch_job_test_util.h"
#include "cc/torch/torch_tensor_ref.h"
#include "cc/torch/train_step.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/state_dict_checks.h"

namespace distkit {
namespace testing {
namespace {

TorchJob job_;
constexpr int kIn = 4, kDim = 8, kOut = 3, kBatch = 5;

// Identity forward; its backward throws while `armed`.
bool armed = false;
struct ThrowInBackward : torch::autograd::Function<ThrowInBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext*,
                               torch::Tensor x) {
    return x.clone();
  }
  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext*, torch::autograd::variable_list grads) {
    if (armed) throw std::runtime_error("backward failed (simulated)");
    return {grads[0]};
  }
};

struct BlockImpl : torch::nn::Module {
  BlockImpl() { fc = register_module("fc", torch::nn::Linear(kDim, kDim)); }
  torch::Tensor forward(torch::Tensor x) { return torch::tanh(fc->forward(x)); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Block);

// Root unit: in, out and a buffer; one unit per block.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    in = register_module("in", torch::nn::Linear(kIn, kDim));
    for (int i = 0; i < 2; ++i) {
      blocks.push_back(register_module(absl::StrCat("block", i), Block()));
    }
    out = register_module("out", torch::nn::Linear(kDim, kOut));
    shift = register_buffer("shift", torch::full({kOut}, 0.5));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = in->forward(x);
    for (auto& block : blocks) {
      x = distkit::UnitForward(*block, [&] { return block->forward(x); });
    }
    x = ThrowInBackward::apply(x);
    return out->forward(x) + shift;
  }
  torch::nn::Linear in{nullptr}, out{nullptr};
  std::vector<Block> blocks;
  torch::Tensor shift;
};
TORCH_MODULE(Net);

Net MakeNet() {
  Net net;
  SeedParameters(*net);
  return net;
}

torch::Tensor Inputs(int rank, int step) {
  return torch::cos(torch::arange(kBatch * kIn, torch::kFloat32) * 0.3 + rank +
                    7 * step)
      .reshape({kBatch, kIn});
}
torch::Tensor Targets(int rank, int step) {
  return torch::sin(torch::arange(kBatch * kOut, torch::kFloat32) * 0.2 + rank -
                    step)
      .reshape({kBatch, kOut});
}
torch::Tensor Loss(Net& net, torch::Tensor x, torch::Tensor y) {
  return torch::nn::functional::mse_loss(net->forward(x), y);
}

std::shared_ptr<FullyShardedDataParallel> Wrap(Net& net) {
  FsdpOptions options;
  options.auto_wrap_policy = distkit::ModuleTypePolicy({"BlockImpl"});
  auto fsdp = FullyShardedDataParallel::Create(net.ptr(), options);
  RequireOk(fsdp.status(), "create");
  Require((*fsdp)->num_units() == 3, "3 units (root and 2 blocks)");
  return *fsdp;
}

void FailedBackward() {
  Net net = MakeNet();
  auto fsdp = Wrap(net);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  // Step 1: backward throws after the head's gradient (root unit) landed.
  opt.zero_grad();
  RequireOk(fsdp->BeforeForward(), "failed backward: before forward");
  armed = true;
  absl::Status s =
      fsdp->Backward(Loss(net, Inputs(job_.rank, 1), Targets(job_.rank, 1)));
  armed = false;
  Check(!s.ok() && absl::StrContains(s.message(), "simulated"),
        "failed backward: Backward reports the exception: " + s.ToString());
  for (int k = 0; k < fsdp->num_units(); ++k) {
    Check(!fsdp->unit_shard(k).is_unsharded(),
          absl::StrCat("failed backward: unit ", k, " resharded"));
  }
  // Step 2, as a step of its own.
  RequireOk(distkit::TrainStep(*fsdp, opt,
                               [&] {
                                 return Loss(net, Inputs(job_.rank, 2),
                                             Targets(job_.rank, 2));
                               })
                .status(),
            "failed backward: the next step");
  auto state = fsdp->FullStateDict();
  RequireOk(state.status(), "failed backward: state");
  // Only step 2, on every rank's batch at once.
  Net ref = MakeNet();
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<torch::Tensor> xs, ys;
  for (int r = 0; r < job_.world; ++r) {
    xs.push_back(Inputs(r, 2));
    ys.push_back(Targets(r, 2));
  }
  ref_opt.zero_grad();
  Loss(ref, torch::cat(xs), torch::cat(ys)).backward();
  ref_opt.step();
  StateDict want = distkit::testing::ParametersOf(*ref);
  want.insert("shift", ref->shift.clone());
  CheckClose(*state, want, 1e-5,
             "failed backward: after the next step vs that step alone");
}

// Every unit's shards, the full parameters and the buffers, copied.
struct Snapshot {
  std::vector<torch::Tensor> shards;
  StateDict params;
  std::vector<torch::Tensor> buffers;
};
Snapshot Take(FullyShardedDataParallel& fsdp, Net& net) {
  Snapshot snap;
  for (int u = 0; u < fsdp.num_units(); ++u) {
    for (int k = 0; k < fsdp.unit_shard(u).num_flat(); ++k) {
      const distkit::TensorRef s = fsdp.unit_shard(u).Shard(k);
      snap.shards.push_back(distkit::AsTorchTensor(s, {s.numel()}).clone());
    }
  }
  auto state = fsdp.FullStateDict();
  RequireOk(state.status(), "snapshot: state");
  snap.params = *state;
  for (const auto& b : net->named_buffers()) {
    snap.buffers.push_back(b.value().clone());
  }
  return snap;
}
bool Same(const Snapshot& a, const Snapshot& b) {
  if (a.shards.size() != b.shards.size()) return false;
  for (size_t i = 0; i < a.shards.size(); ++i) {
    if (!torch::equal(a.shards[i], b.shards[i])) return false;
  }
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    if (!torch::equal(a.buffers[i], b.buffers[i])) return false;
  }
  return distkit::testing::Equal(a.params, b.params);
}

void PartialCheckpoint() {
  Net net = MakeNet();
  auto fsdp = Wrap(net);
  for (const std::string how : {"missing", "corrupt"}) {
    const std::string dir = SharedScratchDir("fsdp_recovery_" + how);
    RequireOk(fsdp->SaveShardedCheckpoint(dir), how + ": save");
    {  // Training moves on: parameters (the shards) and the buffer change.
      torch::NoGradGuard no_grad;
      for (auto& p : net->parameters()) p.add_(0.25);
      net->shift.add_(1.0);
    }
    const Snapshot before = Take(*fsdp, net);
    RequireOk(distkit::dist::Barrier(), "barrier");
    if (job_.rank == 0) {
      const std::string file = dir + "/shard_rank1.pt";
      if (how == "missing") {
        Require(std::remove(file.c_str()) == 0, "remove " + file);
      } else {
        std::ofstream(file, std::ios::trunc) << "not a checkpoint";
      }
    }
    RequireOk(distkit::dist::Barrier(), "barrier");
    absl::Status s = fsdp->LoadShardedCheckpoint(dir);
    Check(!s.ok(), how + ": the load fails on every rank");
    Check(Same(Take(*fsdp, net), before),
          how +
              ": shards, parameters and buffers unchanged after the failed "
              "load (" +
              s.ToString() + ")");
  }
}

void OverflowingMetadata() {
  const int64_t huge = int64_t{1} << 62;
  for (const std::vector<int64_t>& meta :
       std::vector<std::vector<int64_t>>{{2, huge},
                                         {2, 0},
                                         {2, 1, 6, 4, huge},
                                         {2, 1, 6, 4, -1},
                                         {2, huge, 0}}) {
    auto m = distkit::fsdp_internal::DecodeMetadata(
        torch::tensor(meta, torch::kLong), "unit[].meta");
    Check(absl::IsInvalidArgument(m.status()),
          absl::StrCat("metadata [", meta[0], ", ", meta[1],
                       ", ...]: ", m.status().ToString()));
  }
  // A well-formed one still decodes.
  auto m = distkit::fsdp_internal::DecodeMetadata(
      torch::tensor(std::vector<int64_t>{2, 1, 6, 4, 2, 3, 1}, torch::kLong),
      "unit[].meta");
  Check(m.ok() && m->param_numel == std::vector<int64_t>({3, 1}),
        "metadata [2, 1, 6, 4, 2, 3, 1]: " + m.status().ToString());
}

int Main() {
  job_ = JoinTorchJob();
  FailedBackward();
  PartialCheckpoint();
  OverflowingMetadata();
  return LeaveTorchJob("LibTorch FSDP recovery");
}

}  // namespace
}  // namespace testing
}  // namespace distkit

int main() { return distkit::testing::Main(); }
