// One rank of the sharded-training benchmark for LibTorch (fsdp_bench.py
// --libtorch runs it): the same 4-layer MLP as the Python arms (about 26M
// float32 parameters, batch 32, SGD with momentum 0.9) under distkit's C++
// DistributedDataParallel or FullyShardedDataParallel, one unit per Linear,
// each layer's forward through UnitForward so FULL_SHARD frees a unit after
// its forward. Rank 0 prints the median step time and the model state this
// rank held at peak (parameters, gradients, momentum, gathered units), in
// the RESULT line fsdp_bench.py reads, and how many gradients FSDP copied
// instead of reducing them from their own storage (0 when every unit runs
// through UnitForward).
//   fsdp_bench_cc --impl
//   ddp|FULL_SHARD|FULL_SHARD+prefetch|SHARD_GRAD_OP|NO_SHARD
#include <sys/resource.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/distributed_data_parallel.h"
#include "cc/torch/fully_sharded_data_parallel.h"
#include "cc/torch/train_step.h"

namespace {

constexpr int kWidth = 2560, kBatch = 32, kWarmup = 3, kSteps = 10;

// Four Linear layers with ReLU between them, each called through
// UnitForward (a no-op unless the layer is an FSDP unit).
struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    for (int i = 0; i < 4; ++i) {
      layers.push_back(register_module("fc" + std::to_string(i),
                                       torch::nn::Linear(kWidth, kWidth)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < layers.size(); ++i) {
      torch::nn::Linear& layer = layers[i];
      x = distkit::UnitForward(*layer, [&] { return layer->forward(x); });
      if (i + 1 < layers.size()) x = torch::relu(x);
    }
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};
TORCH_MODULE(Mlp);

int64_t Bytes(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const torch::Tensor& t : tensors) n += t.numel() * t.element_size();
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace distkit;
  std::string impl;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--impl") impl = argv[i + 1];
  }
  const bool ddp = impl == "ddp";
  const bool prefetch = impl == "FULL_SHARD+prefetch";
  const std::string strategy = prefetch ? "FULL_SHARD" : impl;
  FsdpOptions options;
  if (strategy == "FULL_SHARD") {
    options.sharding_strategy = ShardingStrategy::kFullShard;
  } else if (strategy == "SHARD_GRAD_OP") {
    options.sharding_strategy = ShardingStrategy::kShardGradOp;
  } else if (strategy == "NO_SHARD") {
    options.sharding_strategy = ShardingStrategy::kNoShard;
  } else if (!ddp) {
    std::fprintf(stderr, "fsdp_bench_cc: unknown --impl '%s'\n", impl.c_str());
    return 2;
  }
  options.auto_wrap_policy = ModuleTypePolicy({"torch::nn::LinearImpl"});
  options.forward_prefetch = prefetch;
  options.backward_prefetch =
      prefetch ? BackwardPrefetch::kBackwardPre : BackwardPrefetch::kNone;

  torch::set_num_threads(1);
  if (absl::Status s = dist::InitDist("pytorch"); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  torch::manual_seed(0);
  Mlp model;
  const int64_t total = Bytes(model->parameters());
  const int64_t largest = Bytes(model->layers[0]->parameters());
  std::shared_ptr<DistributedDataParallel> data_parallel;
  std::shared_ptr<FullyShardedDataParallel> sharded;
  if (ddp) {
    auto made = DistributedDataParallel::Create(model.ptr());
    if (!made.ok()) return 1;
    data_parallel = *made;
  } else {
    auto made = FullyShardedDataParallel::Create(model.ptr(), options);
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
      return 1;
    }
    sharded = *made;
  }
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.01).momentum(0.9));
  torch::Tensor x = torch::randn({kBatch, kWidth}),
                y = torch::randn({kBatch, kWidth});
  auto forward_loss = [&] {
    return torch::nn::functional::mse_loss(model->forward(x), y);
  };
  std::vector<double> times;
  for (int step = 0; step < kWarmup + kSteps; ++step) {
    if (step == kWarmup && sharded) sharded->ResetPeakHeldBytes();
    const absl::Time t0 = absl::Now();
    absl::StatusOr<double> loss =
        ddp ? TrainStep(*data_parallel, sgd, forward_loss)
            : TrainStep(*sharded, sgd, forward_loss);
    if (!loss.ok()) {
      std::fprintf(stderr, "%s\n", loss.status().ToString().c_str());
      return 1;
    }
    if (step >= kWarmup) {
      times.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    }
  }
  std::sort(times.begin(), times.end());
  // Between steps the parameters the optimizer sees are what it keeps
  // momentum for: full under DDP and NO_SHARD, this rank's shard otherwise.
  const int64_t momentum = Bytes(model->parameters());
  // DDP: parameters and gradients, full on every rank; FSDP: what its units
  // held at peak (shards, their gradients, gathered units).
  const int64_t state =
      (ddp ? 2 * total : static_cast<int64_t>(sharded->peak_held_bytes())) +
      momentum;
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  if (dist::GetRank() == 0) {
    std::printf(
        "RESULT impl=cc:%s total=%lld largest=%lld median_ms=%.1f "
        "state_bytes=%lld rss=%lld grad_copies=%lld\n",
        impl.c_str(), static_cast<long long>(total),
        static_cast<long long>(largest), times[times.size() / 2],
        static_cast<long long>(state),
        static_cast<long long>(usage.ru_maxrss) * 1024,
        static_cast<long long>(sharded ? sharded->grad_copies() : 0));
    std::fflush(stdout);
  }
  sharded.reset();
  data_parallel.reset();
  dist::DestroyDist();
  return 0;
}
