// One rank of the DDP step benchmark (ddp_bench.py runs it): a 4-layer MLP of
// about 26M float32 parameters, batch 32, SGD, with distkit's C++
// DistributedDataParallel; or, with --no-overlap, backward first and then one
// all_reduce of all gradients (what DDP's overlap saves). Rank 0 prints the
// median step time and the last step's per-bucket timeline.
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/distributed_data_parallel.h"
#include "cc/torch/train_step.h"

int main(int argc, char** argv) {
  using namespace distkit;
  const bool no_overlap = argc > 1 && std::strcmp(argv[1], "--no-overlap") == 0;
  torch::set_num_threads(1);
  if (!dist::InitDist("pytorch").ok()) return 1;
  const int rank = dist::GetRank();
  constexpr int kWidth = 2560, kBatch = 32, kWarmup = 3, kSteps = 10;
  torch::manual_seed(0);
  auto model = torch::nn::Sequential(
      torch::nn::Linear(kWidth, kWidth), torch::nn::ReLU(),
      torch::nn::Linear(kWidth, kWidth), torch::nn::ReLU(),
      torch::nn::Linear(kWidth, kWidth), torch::nn::ReLU(),
      torch::nn::Linear(kWidth, kWidth));
  auto ddp = DistributedDataParallel::Create(model.ptr());
  if (!ddp.ok()) return 1;
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01));
  torch::Tensor x = torch::randn({kBatch, kWidth}),
                y = torch::randn({kBatch, kWidth});
  std::vector<double> times;
  for (int step = 0; step < kWarmup + kSteps; ++step) {
    const absl::Time t0 = absl::Now();
    if (!no_overlap) {
      auto loss = TrainStep(
          **ddp, sgd, [&] { return torch::mse_loss(model->forward(x), y); });
      if (!loss.ok()) return 1;
    } else {
      sgd.zero_grad();
      {
        auto guard = (*ddp)->no_sync();
        torch::mse_loss(model->forward(x), y).backward();
      }
      std::vector<torch::Tensor> grads;
      for (auto& p : model->parameters()) grads.push_back(p.grad().flatten());
      torch::Tensor flat = torch::cat(grads).div_(dist::GetWorldSize());
      if (!dist::GetDefaultGroup()
               ->AllReduce(
                   TensorRef(flat.data_ptr(), flat.numel(), DataType::kFloat32),
                   ReduceOp::kSum)
               .ok())
        return 1;
      int64_t at = 0;
      for (auto& p : model->parameters()) {
        p.mutable_grad().view({-1}).copy_(flat.slice(0, at, at + p.numel()));
        at += p.numel();
      }
      sgd.step();
    }
    if (step >= kWarmup)
      times.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  std::sort(times.begin(), times.end());
  if (rank == 0) {
    int64_t params = 0;
    for (auto& p : model->parameters()) params += p.numel();
    std::printf("RESULT impl=%s params=%lld median_ms=%.1f\n",
                no_overlap ? "distkit-cc-no-overlap" : "distkit-cc",
                (long long)params, times[times.size() / 2]);
    if (!no_overlap) {
      auto trace = (*ddp)->reducer().last_trace();
      std::printf(
          "TRACE finalize_started_ms=%.1f finalize_wait_ms=%.1f\n",
          absl::ToDoubleMilliseconds(trace.finalize_started_after_prepare),
          absl::ToDoubleMilliseconds(trace.finalize_wait));
      for (const auto& b : trace.buckets) {
        std::printf(
            "BUCKET %d bytes=%zu launched_ms=%.1f done_before_finalize=%d\n",
            b.bucket, b.bytes,
            absl::ToDoubleMilliseconds(b.launched_after_prepare),
            b.done_before_finalize ? 1 : 0);
      }
    }
  }
  dist::DestroyDist();
  return 0;
}
