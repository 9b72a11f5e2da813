// FullyShardedDataParallel (LibTorch) with a tied weight inside one unit: the
// embedding's weight is also the output Linear's (LibTorch's
// named_parameters() lists it under both names; checked first). With one
// unit and with the blocks wrapped (the tie in the root unit), under
// FULL_SHARD and NO_SHARD: the tensor is held once; Adam for 4 steps ends
// where single-process training on the global batch does (<= 1e-6
// relative), and so does its optimizer state; the full state dict has both
// names (rank0_only too) and loads back; the full optimizer state has the
// first name once (rank0_only too), and loaded into a fresh model with the
// full state dict, 2 more steps end where training alone does. Before, the
// tensor took two places in the unit (one never updated) and
// FullOptimStateDict inserted its key twice (c10::Error).
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "absl/strings/match.h"
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
constexpr int kDim = 8;
constexpr double kTolerance = 1e-6;

// A Linear whose weight is another module's tensor (tied).
struct TiedLinearImpl : torch::nn::LinearImpl {
  TiedLinearImpl(int in, int out, torch::Tensor shared)
      : torch::nn::LinearImpl(in, out) {
    parameters_["weight"] = shared;
    weight = shared;
  }
};

struct BlockImpl : torch::nn::Module {
  BlockImpl() { fc = register_module("fc", torch::nn::Linear(kDim, kDim)); }
  torch::Tensor forward(torch::Tensor x) {
    return x + torch::tanh(fc->forward(x));
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  NetImpl() {
    embed = register_module("embed", torch::nn::Embedding(kVocab, kDim));
    block = register_module("block", Block());
    head = register_module(
        "head", std::make_shared<TiedLinearImpl>(kDim, kVocab, embed->weight));
  }
  torch::Tensor forward(torch::Tensor tokens) {
    torch::Tensor x = embed->forward(tokens);
    x = distkit::UnitForward(*block, [&] { return block->forward(x); });
    return head->forward(x);
  }
  torch::nn::Embedding embed{nullptr};
  Block block{nullptr};
  std::shared_ptr<TiedLinearImpl> head;
};
TORCH_MODULE(Net);

Net MakeNet() {
  Net net;
  SeedParameters(*net);  // the tied one twice: the same values
  return net;
}

// Each tensor once: LibTorch's optimizers would step a listed-twice tensor
// twice.
std::vector<torch::Tensor> Unique(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& p : params) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

torch::optim::Adam MakeAdam(Net& net) {
  return torch::optim::Adam(Unique(net->parameters()),
                            torch::optim::AdamOptions(1e-2));
}

// Adam's state of every parameter of `net` (first name of a tied one).
StateDict AdamState(Net& net, torch::optim::Adam& opt) {
  StateDict out;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& p : net->named_parameters()) {
    if (!seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
    auto& s = static_cast<torch::optim::AdamParamState&>(
        *opt.state().at(c10::guts::to_string(p.value().unsafeGetTensorImpl())));
    out.insert("state." + p.key() + ".exp_avg", s.exp_avg().clone());
    out.insert("state." + p.key() + ".exp_avg_sq", s.exp_avg_sq().clone());
    out.insert("state." + p.key() + ".step",
               torch::tensor(s.step(), torch::kLong));
  }
  return out;
}

// Single-process training on every rank's batch at once, steps
// [first, first + steps).
void TrainAlone(Net& net, torch::optim::Adam& opt, int first, int steps) {
  for (int step = first; step < first + steps; ++step) {
    opt.zero_grad();
    GlobalLoss(net, job_.world, step).backward();
    opt.step();
  }
}

void TrainSharded(FullyShardedDataParallel& fsdp, Net& net,
                  torch::optim::Adam& opt, int first, int steps,
                  const std::string& what) {
  for (int step = first; step < first + steps; ++step) {
    RequireOk(distkit::TrainStep(fsdp, opt,
                                 [&] { return RankLoss(net, job_.rank, step); })
                  .status(),
              what + ": train step");
  }
}

// What the test rests on: LibTorch lists a tied tensor under each name.
void TiedIsListedTwice() {
  Net net = MakeNet();
  auto named = net->named_parameters();
  const torch::Tensor* embed = named.find("embed.weight");
  const torch::Tensor* head = named.find("head.weight");
  Require(embed != nullptr && head != nullptr &&
              embed->unsafeGetTensorImpl() == head->unsafeGetTensorImpl(),
          "LibTorch lists the tied tensor as embed.weight and head.weight");
  Require(net->parameters().size() == Unique(net->parameters()).size() + 1,
          "parameters() has the tied tensor twice");
}

void Tied(const std::string& name, const FsdpOptions& options) {
  const int kSteps = 4, kMore = 2;
  Net alone = MakeNet();
  auto alone_opt = MakeAdam(alone);
  TrainAlone(alone, alone_opt, 0, kSteps);
  const StateDict want = ParametersOf(*alone);
  const StateDict want_optim = AdamState(alone, alone_opt);
  TrainAlone(alone, alone_opt, kSteps, kMore);
  const StateDict want_after = ParametersOf(*alone);

  Net net = MakeNet();
  auto fsdp = FullyShardedDataParallel::Create(net.ptr(), options);
  RequireOk(fsdp.status(), name + ": create");
  // The tied tensor once in its unit.
  int64_t held = 0, places = 0;
  for (int k = 0; k < (*fsdp)->num_units(); ++k) {
    for (const auto& p : (*fsdp)->unit_params(k)) {
      ++places;
      held +=
          p.unsafeGetTensorImpl() == net->embed->weight.unsafeGetTensorImpl();
    }
  }
  Check(held == 1 && places == 4,
        absl::StrCat(name, ": the units hold ", places, " tensors, the tied ",
                     "one ", held, " times (want 4, once)"));
  auto opt = MakeAdam(net);
  TrainSharded(**fsdp, net, opt, 0, kSteps, name);
  auto state = (*fsdp)->FullStateDict();
  RequireOk(state.status(), name + ": FullStateDict");
  CheckClose(*state, want, kTolerance, name + ": vs training alone");
  auto only0 = (*fsdp)->FullStateDict(/*rank0_only=*/true);
  RequireOk(only0.status(), name + ": FullStateDict(rank0_only)");
  Check(job_.rank == 0 ? Equal(*only0, *state) : only0->is_empty(),
        name + ": rank0_only state dict");

  auto osd = distkit::FullOptimStateDict(**fsdp, opt);
  RequireOk(osd.status(), name + ": FullOptimStateDict");
  Check(osd->find("state.head.weight.exp_avg") == nullptr,
        name + ": the tied tensor's state is under its first name only");
  CheckClose(*osd, want_optim, kTolerance, name + ": Adam state vs alone");
  auto osd0 = distkit::FullOptimStateDict(**fsdp, opt, /*rank0_only=*/true);
  RequireOk(osd0.status(), name + ": FullOptimStateDict(rank0_only)");
  Check(job_.rank == 0 ? Equal(*osd0, *osd) : osd0->is_empty(),
        name + ": rank0_only optimizer state");

  // Round trip: one more step, then the saved state back.
  TrainSharded(**fsdp, net, opt, kSteps, 1, name);
  CheckOk((*fsdp)->LoadFullStateDict(*state), name + ": LoadFullStateDict");
  Check(Equal(*(*fsdp)->FullStateDict(), *state),
        name + ": the full state dict round-trips");
  CheckOk((*fsdp)->LoadFullStateDict(job_.rank == 0 ? *only0 : StateDict(),
                                     /*rank0_only=*/true),
          name + ": LoadFullStateDict(rank0_only)");
  Check(Equal(*(*fsdp)->FullStateDict(), *state),
        name + ": rank 0's state dict round-trips");

  // A fresh model and optimizer take both and train on as alone.
  Net net2 = MakeNet();
  auto fsdp2 = FullyShardedDataParallel::Create(net2.ptr(), options);
  RequireOk(fsdp2.status(), name + ": create the second");
  auto opt2 = MakeAdam(net2);
  CheckOk((*fsdp2)->LoadFullStateDict(*state),
          name + ": load into a fresh one");
  CheckOk(distkit::LoadFullOptimStateDict(**fsdp2, opt2, *osd),
          name + ": LoadFullOptimStateDict");
  auto back = distkit::FullOptimStateDict(**fsdp2, opt2);
  Check(back.ok() && Equal(*back, *osd),
        name + ": the optimizer state round-trips");
  TrainSharded(**fsdp2, net2, opt2, kSteps, kMore, name);
  auto after = (*fsdp2)->FullStateDict();
  RequireOk(after.status(), name + ": state after reloading");
  CheckClose(*after, want_after, kTolerance,
             name + ": training on after reloading vs alone");
}

int Main() {
  job_ = JoinTorchJob();
  TiedIsListedTwice();
  FsdpOptions one_unit;
  Tied("one unit", one_unit);
  FsdpOptions blocks;
  blocks.auto_wrap_policy = distkit::ModuleTypePolicy({"BlockImpl"});
  Tied("blocks wrapped", blocks);
  FsdpOptions no_shard = blocks;
  no_shard.sharding_strategy = ShardingStrategy::kNoShard;
  Tied("no_shard", no_shard);
  return LeaveTorchJob(
      absl::StrCat("LibTorch FSDP tied weight, world size ", job_.world));
}

}  // namespace
}  // namespace testing
}  // namespace distkit

int main() { return distkit::testing::Main(); }
