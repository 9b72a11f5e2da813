// Trains small models for 5 SGD steps with DistributedDataParallel in every
// rank of a job and writes every parameter and buffer to
// <out>/cpp_<mode>_rank<r>.txt. testing/python/ddp_reference.py trains the same
// models with torch.nn.parallel.DistributedDataParallel and compares
// (ddp_vs_torch_test).
//
// Modes: plain, find_unused, no_sync, unused_no_sync (find_unused_parameters
// with a layer used in the no_sync micro-step only, on even ranks),
// bucket_view, bn (broadcast_buffers), fp16 (fp16 compression hook), separate
// (SeparateDistributedDataParallel).
// Then, on its own: a backward that throws, taken again (BackwardThrows);
// two losses without zero_grad under find_unused_parameters (MultiLoss); a
// backward after the wrapper was destroyed (DestroyedBeforeBackward).
// Both sides build parameters, data and targets with the same torch kernels,
// so they start from identical bits.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/distributed_data_parallel.h"
#include "cc/torch/seed_parameters_test_util.h"
#include "cc/torch/torch_job_test_util.h"
#include "cc/torch/train_step.h"
#include "testing/cc/rank_check.h"

namespace {

using distkit::DistributedDataParallel;
using distkit::GradReducer;

int rank_ = 0;

struct NetImpl : torch::nn::Module {
  NetImpl(const std::string& mode) : mode(mode) {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    if (mode == "bn") bn = register_module("bn", torch::nn::BatchNorm1d(16));
    fc2 = register_module("fc2", torch::nn::Linear(16, 4));
    if (mode == "find_unused") {
      extra = register_module("extra", torch::nn::Linear(16, 4));
      never = register_module("never", torch::nn::Linear(4, 4));
    }
    if (mode == "unused_no_sync") {
      extra = register_module("extra", torch::nn::Linear(16, 4));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor h = fc1->forward(x);
    if (!bn.is_empty()) h = bn->forward(h);
    h = torch::relu(h);
    torch::Tensor out = fc2->forward(h);
    // find_unused: extra is used on odd ranks only; never is never used.
    // unused_no_sync: extra is used in the no_sync micro-step everywhere and
    // in the synchronized one on odd ranks only.
    const bool use_extra =
        rank_ % 2 == 1 || (mode == "unused_no_sync" && in_no_sync);
    if (!extra.is_empty() && use_extra) out = out + extra->forward(h);
    return out;
  }
  std::string mode;
  bool in_no_sync = false;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, extra{nullptr}, never{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

// Parameter i: 0.3 sin(0.37 k + i), plus the rank off rank 0 (DDP must
// replace it with rank 0's values).
void Init(torch::nn::Module& m) { distkit::testing::SeedParameters(m, rank_); }

torch::Tensor Input(int step, int micro) {
  return torch::sin(torch::arange(48, torch::kFloat32).reshape({6, 8}) * 0.3 +
                    (rank_ + 0.7 * step + 0.11 * micro));
}
torch::Tensor Target(int step, int micro) {
  return torch::cos(torch::arange(24, torch::kFloat32).reshape({6, 4}) * 0.2 +
                    (rank_ - 0.3 * step + 0.05 * micro));
}

void Write(torch::nn::Module& m, const std::string& path) {
  std::ofstream f(path);
  f << std::setprecision(9);
  for (const auto& item : m.named_parameters()) {
    f << item.key();
    auto t = item.value().contiguous();
    for (int64_t k = 0; k < t.numel(); ++k) f << ' ' << t.data_ptr<float>()[k];
    f << '\n';
  }
  for (const auto& item : m.named_buffers()) {
    if (item.value().scalar_type() != torch::kFloat) continue;
    f << item.key();
    auto t = item.value().contiguous();
    for (int64_t k = 0; k < t.numel(); ++k) f << ' ' << t.data_ptr<float>()[k];
    f << '\n';
  }
}

void Train(const std::string& mode, const std::string& out) {
  torch::manual_seed(0);
  auto net = std::make_shared<NetImpl>(mode);
  Init(*net);
  GradReducer::Options o;
  o.find_unused_parameters = mode == "find_unused" || mode == "unused_no_sync";
  o.gradient_as_bucket_view = mode == "bucket_view";
  if (mode == "fp16") o.comm_hook = distkit::CommHook::kFp16Compress;
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  auto loss_of = [&](int step, int micro) {
    return torch::mse_loss(net->forward(Input(step, micro)),
                           Target(step, micro));
  };
  if (mode == "separate") {
    auto sep = distkit::SeparateDistributedDataParallel::Create(net, o);
    distkit::testing::RequireOk(sep.status(), "separate");
    if (!distkit::IsModelWrapper(**sep) || (*sep)->child("fc1") == nullptr)
      distkit::testing::RequireOk(absl::InternalError("wrapper"), mode);
    for (int step = 0; step < 5; ++step) {
      sgd.zero_grad();
      distkit::testing::RequireOk((*sep)->BeforeForward(), "before forward");
      distkit::testing::RequireOk((*sep)->Backward(loss_of(step, 0)),
                                  "backward");
      sgd.step();
    }
  } else {
    auto ddp = DistributedDataParallel::Create(net, o);
    distkit::testing::RequireOk(ddp.status(), "create");
    if (!distkit::IsModelWrapper(**ddp) || distkit::IsModelWrapper(*net))
      distkit::testing::RequireOk(absl::InternalError("is_model_wrapper"),
                                  mode);
    for (int step = 0; step < 5; ++step) {
      if (mode == "no_sync" || mode == "unused_no_sync") {
        sgd.zero_grad();
        {
          auto guard = (*ddp)->no_sync();
          distkit::testing::RequireOk((*ddp)->BeforeForward(),
                                      "before forward");
          net->in_no_sync = true;
          distkit::testing::RequireOk((*ddp)->Backward(loss_of(step, 1)),
                                      "no_sync backward");
          net->in_no_sync = false;
        }
        distkit::testing::RequireOk((*ddp)->BeforeForward(), "before forward");
        distkit::testing::RequireOk((*ddp)->Backward(loss_of(step, 0)),
                                    "backward");
        sgd.step();
        continue;
      }
      auto loss =
          distkit::TrainStep(**ddp, sgd, [&] { return loss_of(step, 0); });
      distkit::testing::RequireOk(loss.status(), "train step");
    }
  }
  Write(*net, absl::StrCat(out, "/cpp_", mode, "_rank", rank_, ".txt"));
}

// A backward that throws (a gradient hook's error, after the buckets of the
// layers behind it were launched) leaves nothing behind: with the step taken
// again, and gradients set to none between steps (torch 2.x's zero_grad),
// training ends as it does without the failure. Before, the reducer kept the
// failed iteration: the retry found its gradients "marked ready twice",
// never reduced them, and wrote the old averages into freed gradients.
void BackwardThrows() {
  auto train = [](bool fail) {
    torch::manual_seed(0);
    auto net = std::make_shared<NetImpl>("plain");
    Init(*net);
    GradReducer::Options o;
    o.bucket_cap_mb = 1e-4;  // a bucket per parameter: launched as they come
    o.first_bucket_cap_mb = 1e-4;
    auto ddp = DistributedDataParallel::Create(net, o);
    distkit::testing::RequireOk(ddp.status(), "create");
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
    auto to_none = [&] {
      for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
    };
    for (int step = 0; step < 5; ++step) {
      to_none();
      if (fail && step == 2) {
        distkit::testing::RequireOk((*ddp)->BeforeForward(), "before forward");
        const auto hook =
            net->fc1->weight.register_hook([](torch::Tensor) -> torch::Tensor {
              throw std::runtime_error("a failing gradient hook");
            });
        const absl::Status failed = (*ddp)->Backward(
            torch::mse_loss(net->forward(Input(step, 0)), Target(step, 0)));
        net->fc1->weight.remove_hook(hook);
        distkit::testing::Check(
            !failed.ok() &&
                absl::StrContains(failed.message(), "a failing gradient hook"),
            "the backward's error is returned: " + failed.ToString());
        to_none();
      }
      distkit::testing::RequireOk((*ddp)->BeforeForward(), "before forward");
      distkit::testing::RequireOk(
          (*ddp)->Backward(
              torch::mse_loss(net->forward(Input(step, 0)), Target(step, 0))),
          "backward");
      sgd.step();
    }
    std::vector<torch::Tensor> params;
    for (auto& p : net->parameters()) params.push_back(p.detach().clone());
    return params;
  };
  const std::vector<torch::Tensor> clean = train(false);
  const std::vector<torch::Tensor> retried = train(true);
  bool same = clean.size() == retried.size();
  for (size_t i = 0; same && i < clean.size(); ++i) {
    same = torch::equal(clean[i], retried[i]);
  }
  distkit::testing::Check(same,
                          "training with a failed backward retried ends as "
                          "training without it");
}

// Two synchronized backwards without zero_grad between them (two losses),
// find_unused_parameters: `part` is used by every rank in loss 1 and by
// rank 0 alone in loss 2, `spare` by every rank in loss 1 and by none in
// loss 2 (its gradient changed by each rank before loss 2). torch's DDP
// contributes an unused parameter's defined gradient: part's gradient
// ends as avg(loss 1) + rank 0's loss-2 gradient / world, and spare's, unused
// everywhere, as the rank left it, also when gradients are the buckets'
// views. Expected values are computed here, from every rank's data, with
// plain autograd.
struct MultiNetImpl : torch::nn::Module {
  MultiNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    head = register_module("head", torch::nn::Linear(16, 4));
    part = register_module("part", torch::nn::Linear(16, 4));
    spare = register_module("spare", torch::nn::Linear(16, 4));
  }
  torch::Tensor Loss(int rank, int which) {
    const torch::Tensor x =
        torch::sin(torch::arange(48, torch::kFloat32).reshape({6, 8}) * 0.3 +
                   rank + 0.5 * which);
    const torch::Tensor y =
        torch::cos(torch::arange(24, torch::kFloat32).reshape({6, 4}) * 0.2 +
                   rank - 0.4 * which);
    torch::Tensor h = torch::relu(fc1->forward(x));
    torch::Tensor out = head->forward(h);
    if (which == 1) out = out + part->forward(h) + spare->forward(h);
    if (which == 2 && rank == 0) out = out + part->forward(h);
    return torch::mse_loss(out, y);
  }
  torch::nn::Linear fc1{nullptr}, head{nullptr}, part{nullptr}, spare{nullptr};
};

void MultiLoss(bool bucket_view) {
  const std::string what =
      absl::StrCat("multi-loss", bucket_view ? " (bucket view)" : "");
  const int world = distkit::dist::GetWorldSize();
  auto net = std::make_shared<MultiNetImpl>();
  Init(*net);
  GradReducer::Options o;
  o.find_unused_parameters = true;
  o.gradient_as_bucket_view = bucket_view;
  auto ddp = DistributedDataParallel::Create(net, o);
  distkit::testing::RequireOk(ddp.status(), what + ": create");
  // Rank 0's parameters now, on every rank: the reference's.
  auto grads_of = [&](int rank, int which) {
    MultiNetImpl ref;
    {
      torch::NoGradGuard no_grad;
      auto mine = net->parameters();
      auto theirs = ref.parameters();
      for (size_t i = 0; i < mine.size(); ++i) theirs[i].copy_(mine[i]);
    }
    ref.Loss(rank, which).backward();
    std::vector<torch::Tensor> g;
    for (auto& p : ref.parameters()) {
      g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    }
    return g;
  };
  std::vector<torch::Tensor> avg1, avg2;
  for (int r = 0; r < world; ++r) {
    auto g1 = grads_of(r, 1), g2 = grads_of(r, 2);
    for (size_t i = 0; i < g1.size(); ++i) {
      if (r == 0) {
        avg1.push_back(g1[i] / world);
        avg2.push_back(g2[i] / world);
      } else {
        avg1[i] += g1[i] / world;
        avg2[i] += g2[i] / world;
      }
    }
  }
  distkit::testing::RequireOk((*ddp)->BeforeForward(), what);
  distkit::testing::RequireOk((*ddp)->Backward(net->Loss(rank_, 1)),
                              what + ": backward 1");
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->spare->parameters()) p.mutable_grad().add_(rank_);
  }
  distkit::testing::RequireOk((*ddp)->BeforeForward(), what);
  distkit::testing::RequireOk((*ddp)->Backward(net->Loss(rank_, 2)),
                              what + ": backward 2");
  const auto names = net->named_parameters();
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i].key();
    // fc1, head and part: torch's average; spare: untouched.
    torch::Tensor want = avg1[i] + avg2[i];
    if (absl::StartsWith(name, "spare")) want = avg1[i] + rank_;
    const torch::Tensor got = names[i].value().grad();
    distkit::testing::Check(
        got.defined() && torch::allclose(got, want, 1e-5, 1e-6),
        absl::StrCat(
            what, ": ", name, ".grad differs from torch's DDP by ",
            got.defined() ? (got - want).abs().max().item<float>() : -1.0f));
  }
}

// A loss kept past its DistributedDataParallel: backward after the wrapper
// is destroyed runs no hook of it (it used to call into the freed wrapper)
// and leaves this rank's own gradients.
void DestroyedBeforeBackward() {
  auto net = std::make_shared<NetImpl>("plain");
  Init(*net);
  auto ddp = DistributedDataParallel::Create(net);
  distkit::testing::RequireOk(ddp.status(), "destroyed: create");
  NetImpl ref("plain");
  {
    torch::NoGradGuard no_grad;
    auto mine = net->parameters();
    auto theirs = ref.parameters();
    for (size_t i = 0; i < mine.size(); ++i) theirs[i].copy_(mine[i]);
  }
  distkit::testing::RequireOk((*ddp)->BeforeForward(), "destroyed: forward");
  torch::Tensor loss = torch::mse_loss(net->forward(Input(0, 0)), Target(0, 0));
  *ddp = nullptr;  // the only owner
  loss.backward();
  torch::mse_loss(ref.forward(Input(0, 0)), Target(0, 0)).backward();
  auto mine = net->parameters();
  auto theirs = ref.parameters();
  bool same = true;
  for (size_t i = 0; i < mine.size(); ++i) {
    same = same && mine[i].grad().defined() &&
           torch::equal(mine[i].grad(), theirs[i].grad());
  }
  distkit::testing::Check(same,
                          "destroyed: backward after the wrapper's end leaves "
                          "the local gradients");
}

// device_ids as torch defines them, where this machine allows: a CPU module
// with device_ids is refused with torch's text before any collective (every
// rank alike); without them the module is used as it is. (CUDA modules:
// tools/gpu_check.sh.)
void Placement() {
  auto net = std::make_shared<NetImpl>("plain");
  DistributedDataParallel::Placement p;
  p.device_ids = {0};
  auto refused = DistributedDataParallel::Create(net, {}, nullptr, p);
  const std::string message(refused.status().message());
  distkit::testing::Require(
      absl::IsInvalidArgument(refused.status()) &&
          message.find("device_ids and output_device arguments only work with "
                       "single-device/multiple-device GPU modules or CPU "
                       "modules, but got device_ids [0], output_device None, "
                       "and module parameters {cpu}.") != std::string::npos,
      "a CPU module with device_ids refused: " + message);
  auto ddp = DistributedDataParallel::Create(net);
  distkit::testing::RequireOk(ddp.status(), "create without device_ids");
  distkit::testing::Require(
      (*ddp)->device_ids().empty() && !(*ddp)->output_device().has_value(),
      "no placement without device_ids");
  const torch::Tensor x = Input(0, 0);
  distkit::testing::Require((*ddp)->ToInputDevice(x).data_ptr() == x.data_ptr(),
                            "inputs unchanged without device_ids");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ddp_multirank_test OUT_DIR\n");
    return 2;
  }
  rank_ = distkit::testing::JoinTorchJob().rank;
  for (const char* mode : {"plain", "find_unused", "no_sync", "unused_no_sync",
                           "bucket_view", "bn", "fp16", "separate"}) {
    Train(mode, argv[1]);
  }
  Placement();
  BackwardThrows();
  MultiLoss(false);
  MultiLoss(true);
  DestroyedBeforeBackward();
  // Check's failures count (BackwardThrows checks with it).
  return distkit::testing::LeaveTorchJob(
      absl::StrCat("rank ", rank_, ": trained every mode"));
}
