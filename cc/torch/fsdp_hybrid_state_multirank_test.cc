// FullyShardedDataParallel (LibTorch) under HYBRID_SHARD / _HYBRID_SHARD_ZERO2
// on 2 "nodes" (world / 2 ranks each: shard inside a node, replicate across
// them) with several units: FullStateDict(rank0_only) gives the job's rank 0
// the trained values (equal to single-process training on the global batch
// and to FullStateDict()) and every other rank an empty dict, promptly on
// every rank (before, the other node's rank 0 failed after the first unit
// and the rest of its node waited in the next unit's gather); rank 0's dict
// loads into every replica (LoadFullStateDict rank0_only), and the
// rank-0-only optimizer state is rank 0's alone.
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/fsdp_optim_state.h"
#include "cc/torch/fully_sharded_data_parallel.h"
#include "cc/torch/seed_parameters_test_util.h"
#include "cc/torch/token_task_test_util.h"
#include "cc/torch/torch_job_test_util.h"
#include "cc/torch/train_step.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/state_dict_checks.h"

namespace distkit {
namespace testing {
namespace {

TorchJob job_;
constexpr int kDim = 8, kSteps = 3;
// Far below the group timeout a hang would wait for.
constexpr double kPromptSeconds = 20;

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int width) {
    up = register_module("up", torch::nn::Linear(kDim, width));
    down = register_module("down", torch::nn::Linear(width, kDim));
  }
  torch::Tensor forward(torch::Tensor x) {
    return x + down->forward(torch::tanh(up->forward(x)));
  }
  torch::nn::Linear up{nullptr}, down{nullptr};
};
TORCH_MODULE(Block);

// Units: block0, block1 and the root (embed, head).
struct NetImpl : torch::nn::Module {
  NetImpl() {
    embed = register_module("embed", torch::nn::Embedding(kVocab, kDim));
    block0 = register_module("block0", Block(12));
    block1 = register_module("block1", Block(16));
    head = register_module("head", torch::nn::Linear(kDim, kVocab));
  }
  torch::Tensor forward(torch::Tensor tokens) {
    torch::Tensor x = embed->forward(tokens);
    x = distkit::UnitForward(*block0, [&] { return block0->forward(x); });
    x = distkit::UnitForward(*block1, [&] { return block1->forward(x); });
    return head->forward(x);
  }
  torch::nn::Embedding embed{nullptr};
  Block block0{nullptr}, block1{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

Net MakeNet() {
  Net net;
  SeedParameters(*net);
  return net;
}

// Single-process training on every rank's batch at once.
StateDict Reference() {
  Net net = MakeNet();
  torch::optim::SGD opt(net->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    GlobalLoss(net, job_.world, step).backward();
    opt.step();
  }
  return ParametersOf(*net);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

void Hybrid(ShardingStrategy strategy,
            std::shared_ptr<distkit::ProcessGroup> node,
            std::shared_ptr<distkit::ProcessGroup> replicas) {
  const std::string name(distkit::ShardingStrategyName(strategy));
  FsdpOptions options;
  options.sharding_strategy = strategy;
  options.auto_wrap_policy = distkit::ModuleTypePolicy({"BlockImpl"});
  options.replicate_group = replicas;
  Net net = MakeNet();
  auto fsdp = FullyShardedDataParallel::Create(net.ptr(), options, node);
  RequireOk(fsdp.status(), name + ": create");
  Require((*fsdp)->num_units() == 3, name + ": 3 units");
  torch::optim::SGD opt(net->parameters(),
                        torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < kSteps; ++step) {
    RequireOk(distkit::TrainStep(**fsdp, opt,
                                 [&] { return RankLoss(net, job_.rank, step); })
                  .status(),
              name + ": train step");
  }
  const auto began = std::chrono::steady_clock::now();
  auto only0 = (*fsdp)->FullStateDict(/*rank0_only=*/true);
  const double took = Seconds(began);
  RequireOk(only0.status(), name + ": FullStateDict(rank0_only)");
  Check(took < kPromptSeconds,
        absl::StrCat(name, ": FullStateDict(rank0_only) took ", took, " s"));
  auto full = (*fsdp)->FullStateDict();
  RequireOk(full.status(), name + ": FullStateDict");
  CheckClose(*full, Reference(), 1e-5, name + ": vs single process");
  if (job_.rank == 0) {
    Check(Equal(*only0, *full),
          name + ": rank 0's rank0_only dict equals the full one");
  } else {
    Check(only0->is_empty(),
          absl::StrCat(name, ": rank ", job_.rank, " got ", only0->size(),
                       " tensors under rank0_only"));
  }

  // Rank 0's dict loads into every replica.
  RequireOk(distkit::TrainStep(**fsdp, opt,
                               [&] { return RankLoss(net, job_.rank, 9); })
                .status(),
            name + ": one more step");
  Check(!Equal(*(*fsdp)->FullStateDict(), *full), name + ": the step changed");
  CheckOk((*fsdp)->LoadFullStateDict(job_.rank == 0 ? *only0 : StateDict(),
                                     /*rank0_only=*/true),
          name + ": load rank 0's dict");
  Check(Equal(*(*fsdp)->FullStateDict(), *full),
        name + ": rank 0's dict loaded on every replica");

  auto osd = distkit::FullOptimStateDict(**fsdp, opt, /*rank0_only=*/true);
  RequireOk(osd.status(), name + ": FullOptimStateDict(rank0_only)");
  auto all = distkit::FullOptimStateDict(**fsdp, opt);
  RequireOk(all.status(), name + ": FullOptimStateDict");
  Check(
      job_.rank == 0 ? Equal(*osd, *all) && !all->is_empty() : osd->is_empty(),
      name + ": rank0_only optimizer state");
}

int Main() {
  job_ = JoinTorchJob();
  Require(job_.world % 2 == 0, "an even world (2 nodes)");
  // 2 "nodes" of world / 2 ranks: shard inside {0..n-1} / {n..2n-1},
  // replicate over {i, n + i}.
  const int local = job_.world / 2;
  auto world = distkit::dist::GetDefaultGroup();
  std::shared_ptr<distkit::ProcessGroup> node, replicas;
  for (int n = 0; n < 2; ++n) {  // collective: every rank makes each group
    std::vector<int> ranks;
    for (int i = 0; i < local; ++i) ranks.push_back(n * local + i);
    auto g = world->NewGroup(ranks);
    RequireOk(g.status(), "node group");
    if (job_.rank / local == n) node = *g;
  }
  for (int i = 0; i < local; ++i) {
    auto g = world->NewGroup({i, local + i});
    RequireOk(g.status(), "replicate group");
    if (job_.rank % local == i) replicas = *g;
  }
  for (ShardingStrategy strategy :
       {ShardingStrategy::kHybridShard, ShardingStrategy::kHybridShardZero2}) {
    Hybrid(strategy, node, replicas);
  }
  return LeaveTorchJob(absl::StrCat(
      "LibTorch FSDP hybrid state dicts, world size ", job_.world));
}

}  // namespace
}  // namespace testing
}  // namespace distkit

int main() { return distkit::testing::Main(); }
