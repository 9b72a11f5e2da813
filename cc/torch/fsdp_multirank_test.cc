// FullyShardedDataParallel (LibTorch) in every rank of a job: a small
// transformer-like model (embedding, residual blocks, head) trained for 5
// steps under each strategy and option must end with the parameters of
// single-process training on the concatenated global batch (each rank
// computes that reference itself, from the same data) and of distkit's DDP;
// then state dicts, sharded checkpoints (also loaded by a job of another
// size), sharded optimizer state and its full form, memory, the timeline,
// bad input, and ClipGradNorm under every strategy against
// torch::nn::utils::clip_grad_norm_ alone. With "--xlang-save DIR" or
// "--xlang-load DIR" it is the C++ side of the cross-language sharded
// checkpoint test (testing/mixed/fsdp_checkpoint_xlang_test.sh).
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/distributed_data_parallel.h"
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

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int width) {
    up = register_module("up", torch::nn::Linear(kDim, width));
    down = register_module("down", torch::nn::Linear(width, kDim));
    norm = register_module(
        "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
  }
  torch::Tensor forward(torch::Tensor x) {
    return norm->forward(x + down->forward(torch::gelu(up->forward(x))));
  }
  torch::nn::Linear up{nullptr}, down{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  // `routed`: blocks run through UnitForward (so FSDP gathers them one by
  // one); `width` of block i: 12 + 4 i (units of different sizes).
  NetImpl(int blocks, bool routed) : routed(routed) {
    embed = register_module("embed", torch::nn::Embedding(kVocab, kDim));
    for (int i = 0; i < blocks; ++i) {
      layers.push_back(
          register_module(absl::StrCat("block", i), Block(12 + 4 * i)));
    }
    head = register_module("head", torch::nn::Linear(kDim, kVocab));
  }
  torch::Tensor forward(torch::Tensor tokens) {
    torch::Tensor x = embed->forward(tokens);
    for (auto& block : layers) {
      if (routed) {
        x = distkit::UnitForward(*block, [&] { return block->forward(x); });
      } else {
        x = block->forward(x);
      }
    }
    return head->forward(x);
  }
  bool routed;
  torch::nn::Embedding embed{nullptr};
  std::vector<Block> layers;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Net);

// Parameter i: 0.3 sin(0.37 k + i) (+ the rank off rank 0 when `skew`:
// sync_module_states must replace it with rank 0's values).
Net MakeNet(int blocks = 3, bool routed = true, bool skew = false) {
  Net net(blocks, routed);
  SeedParameters(*net, skew ? job_.rank : 0);
  return net;
}

enum class Optim { kSgd, kAdam };
std::unique_ptr<torch::optim::Optimizer> MakeOptimizer(
    Optim o, std::vector<torch::Tensor> params) {
  if (o == Optim::kAdam) {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(1e-2));
  }
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(0.1).momentum(0.9));
}

// Single-process training on every rank's batch at once (micro-batches
// summed, as gradient accumulation does); `after_step` runs after each
// step's optimizer step.
torch::OrderedDict<std::string, torch::Tensor> Reference(
    Optim o, int micros,
    const std::function<void(int, Net&)>& after_step = nullptr) {
  Net net = MakeNet();
  auto opt = MakeOptimizer(o, net->parameters());
  for (int step = 0; step < 5; ++step) {
    opt->zero_grad();
    for (int micro = 0; micro < micros; ++micro) {
      GlobalLoss(net, job_.world, step, micro).backward();
    }
    opt->step();
    if (after_step) after_step(step, net);
  }
  return ParametersOf(*net);
}

// distkit's DDP on the same data.
torch::OrderedDict<std::string, torch::Tensor> Ddp(Optim o) {
  Net net = MakeNet();
  auto ddp = distkit::DistributedDataParallel::Create(net.ptr());
  RequireOk(ddp.status(), "ddp create");
  auto opt = MakeOptimizer(o, net->parameters());
  for (int step = 0; step < 5; ++step) {
    opt->zero_grad();
    RequireOk((*ddp)->Backward(RankLoss(net, job_.rank, step)), "ddp backward");
    opt->step();
  }
  return ParametersOf(*net);
}

struct Mode {
  std::string name;
  FsdpOptions options;
  bool routed = true;
  bool composable = false;  // FullyShard on each block, then the root
  int micros = 1;           // > 1: no_sync accumulation
  Optim optim = Optim::kSgd;
  double tolerance = 1e-5;
};

// A mode with a unit per block (and the root), as most checks wrap.
Mode BlocksMode(std::string name) {
  Mode mode{std::move(name)};
  mode.options.auto_wrap_policy = distkit::ModuleTypePolicy({"BlockImpl"});
  return mode;
}

std::shared_ptr<FullyShardedDataParallel> Wrap(Net net, const Mode& mode) {
  if (mode.composable) {
    for (auto& block : net->layers) {
      RequireOk(distkit::FullyShard(block.ptr(), mode.options).status(),
                mode.name + ": FullyShard(block)");
    }
    auto root = distkit::FullyShard(net.ptr(), mode.options);
    RequireOk(root.status(), mode.name + ": FullyShard(root)");
    return *root;
  }
  auto fsdp = FullyShardedDataParallel::Create(net.ptr(), mode.options);
  RequireOk(fsdp.status(), mode.name + ": create");
  return *fsdp;
}

void TrainSteps(FullyShardedDataParallel& fsdp, Net& net,
                torch::optim::Optimizer& opt, int first, int steps, int micros,
                const std::string& what) {
  for (int step = first; step < first + steps; ++step) {
    if (micros == 1) {
      RequireOk(distkit::TrainStep(
                    fsdp, opt, [&] { return RankLoss(net, job_.rank, step); })
                    .status(),
                what + ": train step");
      continue;
    }
    opt.zero_grad();
    for (int micro = 0; micro < micros; ++micro) {
      auto run = [&] {
        RequireOk(fsdp.BeforeForward(), what + ": before forward");
        RequireOk(fsdp.Backward(RankLoss(net, job_.rank, step, micro)),
                  what + ": backward");
      };
      if (micro + 1 < micros) {
        auto guard = fsdp.no_sync();
        run();
      } else {
        run();
      }
    }
    opt.step();
  }
}

void TrainAndCompare(const Mode& mode) {
  if (std::getenv("FSDP_CHECK_VERBOSE"))
    std::fprintf(stderr, "rank %d: mode %s\n", job_.rank, mode.name.c_str());
  Net net = MakeNet(3, mode.routed, mode.options.sync_module_states);
  auto fsdp = Wrap(net, mode);
  auto opt = MakeOptimizer(mode.optim, net->parameters());
  TrainSteps(*fsdp, net, *opt, 0, 5, mode.micros, mode.name);
  // The reduction reads the gradients where backward wrote them (.grad is
  // the engine's buffer) for routed blocks and the root; blocks gathered
  // by BeforeForward alone are copied in, one copy per parameter and step.
  if (mode.routed) {
    Check(fsdp->grad_copies() == 0,
          absl::StrCat(mode.name, ": ", fsdp->grad_copies(),
                       " gradients copied into the engine's buffer, not "
                       "written there"));
  } else {
    Check(fsdp->grad_copies() > 0,
          mode.name + ": unrouted blocks' gradients are copied (counted)");
  }
  auto state = fsdp->FullStateDict();
  RequireOk(state.status(), mode.name + ": full state dict");
  CheckClose(*state, Reference(mode.optim, mode.micros), mode.tolerance,
             mode.name + " vs single process");
  if (mode.micros == 1 && mode.tolerance <= 1e-5) {
    CheckClose(*state, Ddp(mode.optim), mode.tolerance, mode.name + " vs DDP");
  }
}

// A job of another size: `net` sharded over world ranks {0, 1} (collective
// over the world); nullptr on the other ranks.
std::shared_ptr<FullyShardedDataParallel> TwoRankFsdp(
    Net& net, const FsdpOptions& options) {
  auto pair = distkit::dist::GetDefaultGroup()->NewGroup({0, 1});
  RequireOk(pair.status(), "group {0, 1}");
  if (!(*pair)->is_member()) return nullptr;
  auto two = FullyShardedDataParallel::Create(net.ptr(), options, *pair);
  RequireOk(two.status(), "2-rank fsdp");
  return *two;
}

// The per-element tensors of `dict` (steps compared apart: norms of int64
// tensors are not defined).
StateDict WithoutSteps(const StateDict& dict) {
  StateDict out;
  for (const auto& item : dict) {
    if (!absl::EndsWith(item.key(), ".step"))
      out.insert(item.key(), item.value());
  }
  return out;
}

// SGD's momentum in full: one buffer per parameter, no step; it loads
// back into a fresh SGD unchanged.
void SgdMomentumState() {
  Mode mode = BlocksMode("sgd_state");
  Net net = MakeNet();
  auto fsdp = Wrap(net, mode);
  auto opt = MakeOptimizer(Optim::kSgd, net->parameters());
  TrainSteps(*fsdp, net, *opt, 0, 2, 1, "sgd state");
  auto osd = distkit::FullOptimStateDict(*fsdp, *opt);
  RequireOk(osd.status(), "SGD FullOptimStateDict");
  size_t params = 0, buffers = 0;
  for (const auto& p : net->named_parameters()) {
    ++params;
    const torch::Tensor* t = osd->find("state." + p.key() + ".momentum_buffer");
    buffers += t != nullptr && t->numel() > 0 &&
               t->sizes() == MakeNet()->named_parameters()[p.key()].sizes();
  }
  Check(buffers == params && osd->size() == params,
        absl::StrCat("SGD state: ", buffers, " full momentum buffers of ",
                     params, " parameters, ", osd->size(), " entries"));
  auto fresh = MakeOptimizer(Optim::kSgd, net->parameters());
  CheckOk(distkit::LoadFullOptimStateDict(*fsdp, *fresh, *osd), "SGD load");
  auto back = distkit::FullOptimStateDict(*fsdp, *fresh);
  bool same = back.ok() && back->size() == osd->size();
  for (const auto& item : *osd) {
    same &= same && torch::equal(*back->find(item.key()), item.value());
  }
  Check(same, "SGD state round trip");
}

// The optimizer's full state: equal to Adam's alone after 3 steps; loaded
// into a fresh model and Adam whose units are cut differently (one unit),
// the next 2 steps equal training alone (and differ without it); a 2-rank
// job loading a bigger job's gives the same full state back; bad input is
// refused.
void OptimState() {
  Net alone = MakeNet();
  auto alone_opt = MakeOptimizer(Optim::kAdam, alone->parameters());
  auto step_alone = [&](int step) {
    alone_opt->zero_grad();
    GlobalLoss(alone, job_.world, step).backward();
    alone_opt->step();
  };
  for (int step = 0; step < 3; ++step) step_alone(step);
  StateDict want;
  std::vector<int64_t> want_steps;
  for (const auto& p : alone->named_parameters()) {
    auto& s = static_cast<torch::optim::AdamParamState&>(*alone_opt->state().at(
        c10::guts::to_string(p.value().unsafeGetTensorImpl())));
    want.insert("state." + p.key() + ".exp_avg", s.exp_avg().clone());
    want.insert("state." + p.key() + ".exp_avg_sq", s.exp_avg_sq().clone());
    want_steps.push_back(s.step());
  }
  for (int step = 3; step < 5; ++step) step_alone(step);
  const StateDict final_alone = ParametersOf(*alone);

  Mode mode = BlocksMode("optim_state");
  Net net = MakeNet();
  auto fsdp = Wrap(net, mode);
  auto opt = MakeOptimizer(Optim::kAdam, net->parameters());
  auto empty = distkit::FullOptimStateDict(*fsdp, *opt);
  Check(empty.ok() && empty->is_empty(), "no state before the first step");
  TrainSteps(*fsdp, net, *opt, 0, 3, 1, "optim state");
  auto osd = distkit::FullOptimStateDict(*fsdp, *opt);
  RequireOk(osd.status(), "FullOptimStateDict");
  CheckClose(WithoutSteps(*osd), want, 1e-5, "optimizer state vs Adam alone");
  bool steps_equal = osd->size() == want.size() + want_steps.size();
  for (const auto& item : *osd) {
    if (absl::EndsWith(item.key(), ".step")) {
      steps_equal &= item.value().item<int64_t>() == want_steps[0];
    }
  }
  Check(steps_equal, "every parameter's step is 3");
  auto only0 = distkit::FullOptimStateDict(*fsdp, *opt, /*rank0_only=*/true);
  RequireOk(only0.status(), "rank0_only optimizer state");
  Check(job_.rank == 0 ? only0->size() == osd->size() : only0->is_empty(),
        "rank0_only optimizer state");
  auto full = fsdp->FullStateDict();
  RequireOk(full.status(), "full state dict");

  for (bool load_optim : {true, false}) {
    Mode other{"optim_state_one_unit"};
    other.options.auto_wrap_policy = nullptr;
    Net net2 = MakeNet();
    auto fsdp2 = Wrap(net2, other);
    auto opt2 = MakeOptimizer(Optim::kAdam, net2->parameters());
    RequireOk(fsdp2->LoadFullStateDict(*full), "load the parameters");
    if (load_optim) {
      CheckOk(distkit::LoadFullOptimStateDict(*fsdp2, *opt2, *osd),
              "LoadFullOptimStateDict");
    }
    TrainSteps(*fsdp2, net2, *opt2, 3, 2, 1, "optim state reloaded");
    auto after = fsdp2->FullStateDict();
    RequireOk(after.status(), "state after reloading");
    if (load_optim) {
      CheckClose(*after, final_alone, 1e-5,
                 "training after the optimizer state was reloaded");
    } else {
      double worst = 0;
      for (const auto& item : final_alone) {
        worst = std::max(
            worst,
            (after->find(item.key())->sub(item.value())).norm().item<double>() /
                item.value().norm().item<double>());
      }
      Check(worst > 1e-4, absl::StrCat("without the optimizer state training ",
                                       "differs (", worst, ")"));
    }
  }

  if (job_.world >= 3) {
    Net small = MakeNet();
    if (auto two = TwoRankFsdp(small, mode.options)) {
      auto opt2 = MakeOptimizer(Optim::kAdam, small->parameters());
      CheckOk(distkit::LoadFullOptimStateDict(*two, *opt2, *osd),
              absl::StrCat("2 ranks load the optimizer state of ", job_.world));
      auto back = distkit::FullOptimStateDict(*two, *opt2);
      RequireOk(back.status(), "2-rank FullOptimStateDict");
      bool same = back->size() == osd->size();
      for (const auto& item : *osd) {
        const torch::Tensor* t = back->find(item.key());
        same &= t != nullptr && torch::equal(*t, item.value());
      }
      Check(same, absl::StrCat("optimizer state of ", job_.world,
                               " ranks through 2 ranks is unchanged"));
    }
  }

  // Bad input: refused, nothing loaded.
  auto before = distkit::FullOptimStateDict(*fsdp, *opt);
  auto extra = *osd;
  extra.insert("state.block9.up.weight.exp_avg", torch::zeros({2}));
  absl::Status s = distkit::LoadFullOptimStateDict(*fsdp, *opt, extra);
  Check(absl::IsInvalidArgument(s) &&
            s.message().find("unexpected key state.block9.up.weight.exp_avg") !=
                std::string::npos,
        "extra optimizer key: " + s.ToString());
  auto resized = *osd;
  resized["state.head.bias.exp_avg"] = torch::zeros({kVocab + 1});
  s = distkit::LoadFullOptimStateDict(*fsdp, *opt, resized);
  Check(absl::IsInvalidArgument(s) &&
            s.message().find("state.head.bias.exp_avg has 12 elements") !=
                std::string::npos,
        "resized optimizer state: " + s.ToString());
  auto after = distkit::FullOptimStateDict(*fsdp, *opt);
  bool unchanged = before.ok() && after.ok() && before->size() == after->size();
  for (const auto& item : *before) {
    unchanged &= torch::equal(*after->find(item.key()), item.value());
  }
  Check(unchanged, "refused optimizer state changed nothing");
  torch::optim::LBFGS lbfgs(net->parameters());
  s = distkit::FullOptimStateDict(*fsdp, lbfgs).status();
  Check(absl::IsInvalidArgument(s) &&
            s.message().find("Adam, AdamW, SGD, RMSprop and Adagrad") !=
                std::string::npos,
        "LBFGS: " + s.ToString());
  SgdMomentumState();
}

// Full and sharded state dicts round-trip exactly; optimizer state is
// sharded; memory stays near total / N; prefetches overlap; bad input fails
// on every rank and changes nothing.
// A module with a floating-point buffer (MixedPrecision.buffer_dtype).
struct ShiftNetImpl : torch::nn::Module {
  ShiftNetImpl()
      : fc(register_module("fc", torch::nn::Linear(4, 3))),
        shift(register_buffer("shift", ShiftValues())) {}
  static torch::Tensor ShiftValues() {
    return torch::arange(3, torch::kFloat) * 0.1 + 0.05;
  }
  torch::nn::Linear fc;
  torch::Tensor shift;
};
TORCH_MODULE(ShiftNet);

// `t` is there, held in `dtype`, with `want`'s values.
bool ValuesIn(const torch::Tensor* t, torch::ScalarType dtype,
              const torch::Tensor& want) {
  return t != nullptr && t->scalar_type() == dtype &&
         torch::equal(*t, want.to(dtype));
}

// buffer_dtype: the buffer lives in it; state dicts and sharded checkpoints
// give it in its own dtype, and loads convert back.
void BufferDtype() {
  torch::manual_seed(0);
  ShiftNet net;
  FsdpOptions options;
  options.buffer_dtype = distkit::DataType::kFloat64;
  auto fsdp = FullyShardedDataParallel::Create(net.ptr(), options);
  RequireOk(fsdp.status(), "buffer_dtype: create");
  const torch::Tensor want = ShiftNetImpl::ShiftValues();
  Check(ValuesIn(&net->shift, torch::kDouble, want),
        "buffer_dtype: the buffer lives in float64");
  auto state = (*fsdp)->FullStateDict();
  RequireOk(state.status(), "buffer_dtype: state");
  const torch::Tensor* saved = state->find("shift");
  Check(ValuesIn(saved, torch::kFloat, want),
        "buffer_dtype: the state dict gives the buffer in float32");
  auto changed = *state;
  changed["shift"] = want * 2;
  RequireOk((*fsdp)->LoadFullStateDict(changed), "buffer_dtype: load");
  Check(ValuesIn(&net->shift, torch::kDouble, want * 2),
        "buffer_dtype: a float32 state dict loads into the float64 buffer");
  const std::string dir = SharedScratchDir("fsdp_buffer_dtype");
  RequireOk((*fsdp)->SaveShardedCheckpoint(dir), "buffer_dtype: save");
  {
    torch::NoGradGuard no_grad;
    net->shift.zero_();
  }
  RequireOk((*fsdp)->LoadShardedCheckpoint(dir), "buffer_dtype: load sharded");
  Check(ValuesIn(&net->shift, torch::kDouble, want * 2),
        "buffer_dtype: the sharded checkpoint round trip");

  // Composable: the inner FullyShard casts its buffer; the outer one, which
  // adopts its units, still gives it in its own dtype.
  auto outer = std::make_shared<torch::nn::Module>();
  ShiftNet inner;
  outer->register_module("inner", inner.ptr());
  outer->register_module("head", torch::nn::Linear(3, 2));
  RequireOk(distkit::FullyShard(inner.ptr(), options).status(),
            "buffer_dtype: FullyShard(inner)");
  auto root = distkit::FullyShard(outer, options);
  RequireOk(root.status(), "buffer_dtype: FullyShard(root)");
  auto nested = (*root)->FullStateDict();
  RequireOk(nested.status(), "buffer_dtype: nested state");
  const torch::Tensor* inner_shift = nested->find("inner.shift");
  Check(ValuesIn(inner_shift, torch::kFloat, want),
        "buffer_dtype: the adopted unit's buffer in its own dtype");
}

// A forward that throws (an out-of-memory error in a block) after its
// unit was gathered and the next block's gather prefetched, once inside
// TrainStep and once in a forward the caller runs and ends with Reshard():
// what it gathered is freed and the prefetched gather dropped, so a change
// of the shards before the next forward (an optimizer step, here +0.25 on
// every parameter) is what training goes on with.
void ForwardThrows() {
  Mode mode = BlocksMode("forward_throws");
  mode.options.forward_prefetch = true;
  Net net = MakeNet();
  auto fsdp = Wrap(net, mode);
  auto opt = MakeOptimizer(Optim::kSgd, net->parameters());
  auto shift = [](Net& n) {
    torch::NoGradGuard no_grad;
    for (auto& p : n->parameters()) p.add_(0.25);
  };
  // Block 0's forward, then block 1's unit gathered (block 2's prefetched)
  // and its forward throws.
  auto failing_forward = [&]() -> torch::Tensor {
    torch::Tensor x = net->embed->forward(Tokens(job_.rank, 9, 0));
    x = distkit::UnitForward(*net->layers[0],
                             [&] { return net->layers[0]->forward(x); });
    return distkit::UnitForward(*net->layers[1], []() -> torch::Tensor {
      throw std::runtime_error("out of memory (simulated)");
    });
  };
  auto thrown = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return absl::StrContains(e.what(), "out of memory (simulated)");
    }
    return false;
  };
  TrainSteps(*fsdp, net, *opt, 0, 1, 1, mode.name);  // the order to prefetch
  Check(thrown([&] {
          distkit::TrainStep(*fsdp, *opt, failing_forward).IgnoreError();
        }),
        "forward_throws: TrainStep passes the forward's exception on");
  for (int k = 0; k < fsdp->num_units(); ++k) {
    Check(!fsdp->unit_shard(k).is_unsharded(),
          absl::StrCat("forward_throws: unit ", k, " freed by TrainStep"));
  }
  shift(net);
  TrainSteps(*fsdp, net, *opt, 1, 1, 1, mode.name);
  Check(thrown([&] {
          RequireOk(fsdp->BeforeForward(), "forward_throws: before forward");
          failing_forward();
        }),
        "forward_throws: the caller's forward throws");
  CheckOk(fsdp->Reshard(), "forward_throws: reshard after the failed forward");
  shift(net);
  TrainSteps(*fsdp, net, *opt, 2, 3, 1, mode.name);
  auto state = fsdp->FullStateDict();
  RequireOk(state.status(), "forward_throws: full state dict");
  CheckClose(*state,
             Reference(Optim::kSgd, 1,
                       [&](int step, Net& n) {
                         if (step < 2) shift(n);
                       }),
             1e-5, "forward_throws: after failed forwards vs single process");
}

void StateAndErrors() {
  Mode mode = BlocksMode("state");
  mode.options.forward_prefetch = true;
  Net net = MakeNet();
  auto fsdp = Wrap(net, mode);
  Check(fsdp->num_units() == 4, absl::StrCat("units: ", fsdp->num_units()));
  auto opt = MakeOptimizer(Optim::kSgd, net->parameters());
  // The first step gathers every unit up front (it learns which ones the
  // model runs through UnitForward); memory is measured after it.
  TrainSteps(*fsdp, net, *opt, 0, 1, 1, "state");
  fsdp->ResetPeakHeldBytes();
  fsdp->TakeTimeline();
  TrainSteps(*fsdp, net, *opt, 1, 2, 1, "state");

  // The optimizer steps 1/N of every parameter: its momentum buffers sum
  // to the model's size over the ranks.
  int64_t model_numel = 0, mine = 0;
  for (const auto& p : MakeNet()->parameters()) model_numel += p.numel();
  for (const auto& p : net->parameters()) mine += p.numel();
  torch::Tensor total = torch::tensor({mine}, torch::kLong);
  RequireOk(
      distkit::dist::GetDefaultGroup()->AllReduce(
          distkit::TensorRef(total.data_ptr(), 1, distkit::DataType::kInt64),
          distkit::ReduceOp::kSum),
      "sum of shard sizes");
  Check(total.item<int64_t>() == model_numel,
        absl::StrCat("shards hold ", total.item<int64_t>(),
                     " elements, the model ", model_numel));

  // Memory: the shards (parameters and gradients, 2 x total / N), the root
  // unit's full parameters and gradients (it stays gathered from
  // BeforeForward to the end of backward, as torch's root unit does), and
  // at most two blocks' full parameters (one computing, one prefetched)
  // and two blocks' full gradients (one being written, one being reduced
  // while backward goes on).
  size_t total_bytes = model_numel * 4, largest = 0, root = 0;
  for (int k = 0; k < fsdp->num_units(); ++k) {
    size_t unit_bytes = 0;
    for (int i = 0; i < fsdp->unit_shard(k).num_params(); ++i) {
      unit_bytes += fsdp->unit_shard(k).placement(i).numel * 4;
    }
    if (fsdp->unit_name(k).empty()) {
      root = unit_bytes;
    } else {
      largest = std::max(largest, unit_bytes);
    }
  }
  // + padding: each flat buffer rounds up to a multiple of N elements.
  const double bound = 2.0 * total_bytes / job_.world + 2.0 * root +
                       4.0 * largest + 2 * 4 * job_.world * fsdp->num_units();
  if (std::getenv("FSDP_CHECK_VERBOSE")) {
    std::fprintf(stderr, "rank %d: peak %zu bytes, bound %.0f, model %zu\n",
                 job_.rank, fsdp->peak_held_bytes(), bound, total_bytes);
  }
  Check(
      fsdp->peak_held_bytes() <= bound,
      absl::StrCat("peak ", fsdp->peak_held_bytes(), " bytes > bound ", bound));
  // Below DDP's parameters and gradients once the shards are small enough
  // for this model's few large units to matter less (3+ ranks).
  Check(job_.world < 3 || fsdp->peak_held_bytes() < 2 * total_bytes,
        absl::StrCat("peak ", fsdp->peak_held_bytes(),
                     " bytes, not below DDP's parameters and gradients"));

  // Timeline: with forward_prefetch a block's gather starts before the
  // previous block's forward ends (its reshard).
  auto timeline = fsdp->TakeTimeline();
  bool overlapped = false;
  for (size_t a = 0; a < timeline.size(); ++a) {
    if (timeline[a].kind != distkit::FlatShard::Event::kUnshardStart) continue;
    for (size_t b = a + 1; b < timeline.size(); ++b) {
      if (timeline[b].unit != timeline[a].unit &&
          timeline[b].kind == distkit::FlatShard::Event::kReshard) {
        overlapped = true;
      }
      if (timeline[b].unit == timeline[a].unit) break;
    }
  }
  Check(overlapped || job_.world == 1,
        "no gather overlapped another unit's compute");

  // Full state dict: rank0_only, round trip, from rank 0.
  auto full = fsdp->FullStateDict();
  RequireOk(full.status(), "full state dict");
  auto only0 = fsdp->FullStateDict(/*rank0_only=*/true);
  RequireOk(only0.status(), "rank0_only state dict");
  Check(job_.rank == 0 ? Equal(*only0, *full) : only0->is_empty(),
        "rank0_only");
  TrainSteps(*fsdp, net, *opt, 3, 1, 1, "state");
  Check(!Equal(*fsdp->FullStateDict(), *full), "training changed nothing");
  CheckOk(fsdp->LoadFullStateDict(*full), "load full state dict");
  Check(Equal(*fsdp->FullStateDict(), *full), "full state dict round trip");
  TrainSteps(*fsdp, net, *opt, 3, 1, 1, "state");
  const torch::OrderedDict<std::string, torch::Tensor> nothing;
  CheckOk(fsdp->LoadFullStateDict(job_.rank == 0 ? *full : nothing,
                                  /*rank0_only=*/true),
          "load rank 0's state dict");
  Check(Equal(*fsdp->FullStateDict(), *full), "rank0_only round trip");

  // Sharded checkpoint: round trip, and a 2-rank job loads a bigger job's.
  const std::string dir = SharedScratchDir("fsdp_sharded");
  CheckOk(fsdp->SaveShardedCheckpoint(dir), "save sharded");
  TrainSteps(*fsdp, net, *opt, 3, 1, 1, "state");
  CheckOk(fsdp->LoadShardedCheckpoint(dir), "load sharded");
  Check(Equal(*fsdp->FullStateDict(), *full), "sharded checkpoint round trip");
  if (job_.world >= 3) {
    Net small = MakeNet();
    if (auto two = TwoRankFsdp(small, mode.options)) {
      CheckOk(two->LoadShardedCheckpoint(dir),
              absl::StrCat("2 ranks load a checkpoint of ", job_.world));
      auto loaded = two->FullStateDict();
      Check(loaded.ok() && Equal(*loaded, *full),
            absl::StrCat("a checkpoint of ", job_.world, " ranks loaded by 2"));
    }
  }

  // Bad input: every rank fails, nothing changes.
  auto extra = *full;
  extra.insert("block9.up.weight", torch::zeros({2}));
  absl::Status s = fsdp->LoadFullStateDict(extra);
  Check(absl::IsInvalidArgument(s) &&
            s.message().find("unexpected key 'block9.up.weight'") !=
                std::string::npos,
        "extra key: " + s.ToString());
  auto missing = *full;
  if (job_.rank == job_.world - 1) missing.erase("head.bias");
  s = fsdp->LoadFullStateDict(missing);
  Check(absl::IsInvalidArgument(s),
        "a rank without head.bias: " + s.ToString());
  auto reshaped = *full;
  reshaped["head.bias"] = torch::zeros({kVocab + 1});
  s = fsdp->LoadFullStateDict(reshaped, /*rank0_only=*/true);
  Check(absl::IsInvalidArgument(s),
        "rank 0's head.bias reshaped: " + s.ToString());
  Check(Equal(*fsdp->FullStateDict(), *full),
        "a refused load changed the model");
  {
    Net other = MakeNet(2);  // another model's checkpoint
    auto wrong = FullyShardedDataParallel::Create(other.ptr(), mode.options);
    RequireOk(wrong.status(), "other model");
    s = (*wrong)->LoadShardedCheckpoint(dir);
    Check(absl::IsInvalidArgument(s) &&
              s.message().find("another model") != std::string::npos,
          "another model's sharded checkpoint: " + s.ToString());
  }
  // Units that differ across ranks: refused on every rank, nothing sharded.
  {
    Net odd = MakeNet(job_.rank == job_.world - 1 && job_.world > 1 ? 2 : 3);
    std::vector<int64_t> before;
    for (const auto& p : odd->parameters()) before.push_back(p.numel());
    auto bad = FullyShardedDataParallel::Create(odd.ptr(), mode.options);
    if (job_.world > 1) {
      Check(absl::IsInvalidArgument(bad.status()),
            "a model that differs across ranks: " + bad.status().ToString());
    }
    std::vector<int64_t> after;
    for (const auto& p : odd->parameters()) after.push_back(p.numel());
    Check(job_.world == 1 || before == after, "a refused model was sharded");
  }
  s = fsdp->BeforeForward();
  CheckOk(s, "before forward");
  Check(absl::IsFailedPrecondition(fsdp->LoadFullStateDict(*full)),
        "load between forward and backward");
  CheckOk(fsdp->Reshard(), "reshard");
}

// ---- Gradient clipping ------------------------------------------------------

constexpr double kMaxNorm = 0.05;

// Single-process training on the global batch, clipped by
// torch::nn::utils::clip_grad_norm_: the parameters after `steps` steps and
// the norms it clipped by.
StateDict ReferenceClipped(int steps, double max_norm, double norm_type,
                           std::vector<double>* norms) {
  Net net = MakeNet();
  auto opt = MakeOptimizer(Optim::kSgd, net->parameters());
  for (int step = 0; step < steps; ++step) {
    opt->zero_grad();
    GlobalLoss(net, job_.world, step).backward();
    norms->push_back(torch::nn::utils::clip_grad_norm_(net->parameters(),
                                                       max_norm, norm_type));
    opt->step();
  }
  return ParametersOf(*net);
}

// ClipGradNorm under `options`: parameters and norms equal the clipped
// single-process training's (<= 1e-5), and clipping took effect.
void TrainClipped(const std::string& name, FsdpOptions options,
                  double norm_type,
                  std::shared_ptr<distkit::ProcessGroup> group,
                  double max_norm = kMaxNorm) {
  const std::string what =
      absl::StrCat("clip ", name, " (norm ", norm_type, ")");
  constexpr int kSteps = 3;
  Net net = MakeNet();
  auto fsdp = FullyShardedDataParallel::Create(net.ptr(), options, group);
  RequireOk(fsdp.status(), what + ": create");
  auto opt = MakeOptimizer(Optim::kSgd, net->parameters());
  std::vector<double> norms;
  for (int step = 0; step < kSteps; ++step) {
    opt->zero_grad();
    RequireOk((*fsdp)->BeforeForward(), what + ": before forward");
    RequireOk((*fsdp)->Backward(RankLoss(net, job_.rank, step)),
              what + ": backward");
    auto norm = (*fsdp)->ClipGradNorm(max_norm, norm_type);
    RequireOk(norm.status(), what + ": ClipGradNorm");
    norms.push_back(*norm);
    opt->step();
  }
  std::vector<double> want_norms;
  const StateDict want =
      ReferenceClipped(kSteps, max_norm, norm_type, &want_norms);
  auto state = (*fsdp)->FullStateDict();
  RequireOk(state.status(), what + ": state");
  CheckClose(*state, want, 1e-5, what + " vs clip_grad_norm_ alone");
  for (int step = 0; step < kSteps; ++step) {
    Check(std::abs(norms[step] - want_norms[step]) <= 1e-5 * want_norms[step],
          absl::StrCat(what, ": step ", step, "'s norm ", norms[step],
                       ", alone ", want_norms[step]));
    Check(want_norms[step] > 2 * max_norm,
          absl::StrCat(what, ": nothing to clip at step ", step));
  }
}

// Every sharding strategy (the HYBRID_* ones with each rank its own
// replica group, so the shard group is the world), the infinity norm and
// a 3-norm; bad norm_type.
void Clipping() {
  const auto blocks = distkit::ModuleTypePolicy({"BlockImpl"});
  auto world = distkit::dist::GetDefaultGroup();
  std::shared_ptr<distkit::ProcessGroup> alone;
  for (int r = 0; r < job_.world; ++r) {  // collective: every rank makes each
    auto g = world->NewGroup({r});
    RequireOk(g.status(), "replica group");
    if (r == job_.rank) alone = *g;
  }
  for (ShardingStrategy strategy :
       {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
        ShardingStrategy::kNoShard, ShardingStrategy::kHybridShard,
        ShardingStrategy::kHybridShardZero2}) {
    FsdpOptions options;
    options.sharding_strategy = strategy;
    options.auto_wrap_policy = blocks;
    if (strategy == ShardingStrategy::kHybridShard ||
        strategy == ShardingStrategy::kHybridShardZero2) {
      options.replicate_group = alone;
    }
    TrainClipped(std::string(distkit::ShardingStrategyName(strategy)), options,
                 2.0, world);
  }
  FsdpOptions options;
  options.auto_wrap_policy = blocks;
  // The largest gradient element is below 0.1 here.
  TrainClipped("full_shard", options, std::numeric_limits<double>::infinity(),
               world, /*max_norm=*/0.005);
  options.offload_params = true;
  TrainClipped("full_shard offload", options, 3.0, world);
  Net net = MakeNet();
  auto fsdp = FullyShardedDataParallel::Create(net.ptr(), options);
  RequireOk(fsdp.status(), "clip: create");
  absl::Status s = (*fsdp)->ClipGradNorm(1.0, 0.0).status();
  Check(absl::IsInvalidArgument(s) &&
            s.message().find("norm_type must be positive") != std::string::npos,
        "norm_type 0: " + s.ToString());
  // A NaN gradient on the last rank alone: the total norm is NaN on every
  // rank, for the infinity norm too (as torch's clip_grad_norm_ gives).
  for (double norm_type : {std::numeric_limits<double>::infinity(), 2.0}) {
    RequireOk((*fsdp)->BeforeForward(), "clip nan: before forward");
    RequireOk((*fsdp)->Backward(RankLoss(net, job_.rank, 0)),
              "clip nan: backward");
    if (job_.rank == job_.world - 1) {
      torch::NoGradGuard no_grad;
      for (auto& p : net->parameters()) {
        if (p.grad().defined()) p.mutable_grad().fill_(std::nan(""));
      }
    }
    auto norm = (*fsdp)->ClipGradNorm(1.0, norm_type);
    RequireOk(norm.status(), "clip nan: ClipGradNorm");
    Check(std::isnan(*norm), absl::StrCat("clip nan (norm ", norm_type,
                                          "): total ", *norm, ", not nan"));
    // torch's clip_grad_norm_ multiplies by clamp(NaN, max=1), NaN: every
    // gradient element of every rank becomes NaN.
    int64_t numbers = 0;
    for (const auto& p : net->parameters()) {
      if (p.grad().defined()) {
        numbers +=
            p.grad().numel() - torch::isnan(p.grad()).sum().item<int64_t>();
      }
    }
    Check(numbers == 0,
          absl::StrCat("clip nan (norm ", norm_type, "): ", numbers,
                       " gradient elements are not NaN after clipping"));
  }
}

// ---- Sharded checkpoints across languages
// -------------------------------------

// Parameter i's value in the cross-language checkpoint: MakeNet's, plus
// `shift` (i + 1) when Python changed it (fsdp_checkpoint_rank.py computes
// the same).
StateDict CrossLanguageValues(double shift) {
  StateDict want;
  int i = 0;
  for (const auto& p : MakeNet()->named_parameters()) {
    want.insert(p.key(), p.value().detach() + shift * (i + 1));
    ++i;
  }
  return want;
}

// --xlang-save DIR: writes MakeNet's parameters as a sharded checkpoint;
// --xlang-load DIR: loads one Python wrote (values + 0.01 (i + 1)) and
// checks them. Units: one per block, and the root.
void CrossLanguage(const std::string& mode, const std::string& dir) {
  FsdpOptions options;
  options.auto_wrap_policy = distkit::ModuleTypePolicy({"BlockImpl"});
  Net net = MakeNet();
  auto fsdp = FullyShardedDataParallel::Create(net.ptr(), options);
  RequireOk(fsdp.status(), "xlang: create");
  if (mode == "--xlang-save") {
    CheckOk((*fsdp)->SaveShardedCheckpoint(dir), "xlang: save " + dir);
    return;
  }
  CheckOk((*fsdp)->LoadShardedCheckpoint(dir),
          "xlang: load Python's checkpoint " + dir);
  auto state = (*fsdp)->FullStateDict();
  RequireOk(state.status(), "xlang: state");
  CheckClose(
      *state, CrossLanguageValues(0.01), 1e-6,
      absl::StrCat("Python's checkpoint loaded at ", job_.world, " ranks"));
}

void Hybrid() {
  // 2 "nodes" x 2 ranks: shard inside {0,1} / {2,3}, replicate over {0,2} /
  // {1,3}.
  auto world = distkit::dist::GetDefaultGroup();
  std::vector<std::shared_ptr<distkit::ProcessGroup>> groups;
  for (std::vector<int> ranks :
       std::vector<std::vector<int>>{{0, 1}, {2, 3}, {0, 2}, {1, 3}}) {
    auto g = world->NewGroup(ranks);
    RequireOk(g.status(), "hybrid group");
    groups.push_back(*g);
  }
  auto node = groups[job_.rank / 2];
  auto replicas = groups[2 + job_.rank % 2];
  for (ShardingStrategy strategy :
       {ShardingStrategy::kHybridShard, ShardingStrategy::kHybridShardZero2}) {
    Mode mode =
        BlocksMode(std::string(distkit::ShardingStrategyName(strategy)));
    mode.options.sharding_strategy = strategy;
    mode.options.replicate_group = replicas;
    Net net = MakeNet();
    auto fsdp = FullyShardedDataParallel::Create(net.ptr(), mode.options, node);
    RequireOk(fsdp.status(), mode.name);
    auto opt = MakeOptimizer(Optim::kSgd, net->parameters());
    TrainSteps(**fsdp, net, *opt, 0, 5, 1, mode.name);
    auto state = (*fsdp)->FullStateDict();
    RequireOk(state.status(), mode.name + ": state");
    CheckClose(*state, Reference(Optim::kSgd, 1), 1e-5, mode.name);
  }
}

int Main(int argc, char** argv) {
  job_ = JoinTorchJob();
  if (argc == 3) {  // the cross-language checkpoint test's C++ side
    CrossLanguage(argv[1], argv[2]);
    return LeaveTorchJob("LibTorch FSDP xlang");
  }

  const auto blocks = distkit::ModuleTypePolicy({"BlockImpl"});
  std::vector<Mode> modes;
  auto add = [&](std::string name, std::function<void(Mode&)> set) {
    Mode m{std::move(name)};
    m.options.auto_wrap_policy = blocks;
    set(m);
    modes.push_back(std::move(m));
  };
  add("full_shard", [](Mode&) {});
  add("full_shard_unrouted", [](Mode& m) { m.routed = false; });
  add("full_shard_prefetch",
      [](Mode& m) { m.options.forward_prefetch = true; });
  add("full_shard_no_backward_prefetch", [](Mode& m) {
    m.options.backward_prefetch = distkit::BackwardPrefetch::kNone;
  });
  add("full_shard_backward_post", [](Mode& m) {
    m.options.backward_prefetch = distkit::BackwardPrefetch::kBackwardPost;
  });
  add("shard_grad_op", [](Mode& m) {
    m.options.sharding_strategy = ShardingStrategy::kShardGradOp;
  });
  add("no_shard", [](Mode& m) {
    m.options.sharding_strategy = ShardingStrategy::kNoShard;
  });
  add("offload", [](Mode& m) { m.options.offload_params = true; });
  add("no_sync", [](Mode& m) { m.micros = 2; });
  add("sync_module_states",
      [](Mode& m) { m.options.sync_module_states = true; });
  add("size_policy", [](Mode& m) {
    m.options.auto_wrap_policy = distkit::SizeBasedPolicy(200);
  });
  add("one_unit", [](Mode& m) { m.options.auto_wrap_policy = nullptr; });
  add("adam", [](Mode& m) { m.optim = Optim::kAdam; });
  add("fully_shard", [](Mode& m) {
    m.composable = true;
    m.optim = Optim::kAdam;
  });
  // bfloat16 compute and reduction: 8 significant bits, so each gradient
  // is off by about 2^-8 relative; after 5 SGD steps of lr 0.1 the
  // parameters (of size ~0.3) move by ~0.1 and differ by well under 1%.
  add("bf16", [](Mode& m) {
    m.options.param_dtype = distkit::DataType::kBFloat16;
    m.options.reduce_dtype = distkit::DataType::kBFloat16;
    m.tolerance = 1e-2;
  });
  for (const Mode& mode : modes) TrainAndCompare(mode);
  StateAndErrors();
  ForwardThrows();
  BufferDtype();
  OptimState();
  Clipping();
  if (job_.world == 4) Hybrid();

  return LeaveTorchJob("LibTorch FSDP");
}

}  // namespace
}  // namespace testing
}  // namespace distkit

int main(int argc, char** argv) { return distkit::testing::Main(argc, argv); }
