// The main job: data-parallel training of a LibTorch model with distkit's C++
// DistributedDataParallel. Every rank trains on its own shard of a synthetic
// classification task (inputs drawn from a fixed Gaussian, labels given by a
// fixed random "teacher" network: no download), gradients are averaged
// during backward, and at the end every rank checks that all ranks hold
// identical parameters and that the loss fell.
//
// Launch: tools/run_main_job.sh (distrun, 4 local ranks). Options:
//   --steps N (default 1200), --batch B per rank (default 64), --log-every K
//   (default 100).

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/distributed_data_parallel.h"
#include "cc/torch/train_step.h"

namespace {

constexpr int kFeatures = 32;
constexpr int kClasses = 10;

int rank_ = 0;

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "main_job rank %d: %s\n", rank_, s.ToString().c_str());
  return 1;
}

int Flag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  return fallback;
}

torch::nn::Sequential Mlp() {
  return torch::nn::Sequential(torch::nn::Linear(kFeatures, 128),
                               torch::nn::ReLU(), torch::nn::Linear(128, 128),
                               torch::nn::ReLU(),
                               torch::nn::Linear(128, kClasses));
}

// The task: x ~ N(0, 1)^32, label = argmax of a fixed random teacher MLP.
struct Task {
  Task() : teacher(Mlp()) {
    torch::manual_seed(1234);  // the same teacher on every rank
    teacher = Mlp();
    teacher->eval();
  }
  std::pair<torch::Tensor, torch::Tensor> Batch(int64_t n,
                                                torch::Generator& g) {
    torch::Tensor x = at::randn({n, kFeatures}, g);
    torch::NoGradGuard no_grad;
    return {x, teacher->forward(x).argmax(1)};
  }
  torch::nn::Sequential teacher;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  torch::set_num_threads(1);  // one core per rank
  const int steps = Flag(argc, argv, "--steps", 1200);
  const int batch = Flag(argc, argv, "--batch", 64);
  const int log_every = Flag(argc, argv, "--log-every", 100);

  if (absl::Status s = dist::InitDist("pytorch"); !s.ok()) return Fail(s);
  rank_ = dist::GetRank();
  const int world = dist::GetWorldSize();
  auto group = dist::GetDefaultGroup();

  Task task;
  // Each rank starts from its own random model; DDP replaces it with rank 0's.
  torch::manual_seed(100 + rank_);
  auto model = Mlp();
  auto ddp = DistributedDataParallel::Create(model.ptr());
  if (!ddp.ok()) return Fail(ddp.status());
  torch::optim::SGD sgd(model->parameters(),
                        torch::optim::SGDOptions(0.05).momentum(0.9));
  auto data = at::make_generator<at::CPUGeneratorImpl>(7 + rank_);  // shard
  if (rank_ == 0) {
    std::printf(
        "main_job: %d ranks, %d steps of %d samples per rank, %zu buckets\n",
        world, steps, batch, (*ddp)->reducer().buckets().size());
  }

  const absl::Time start = absl::Now();
  double first_loss = -1, window = 0;
  int in_window = 0;
  for (int step = 1; step <= steps; ++step) {
    auto [x, y] = task.Batch(batch, data);
    absl::StatusOr<double> loss = TrainStep(**ddp, sgd, [&, &x = x, &y = y] {
      return torch::nn::functional::cross_entropy(model->forward(x), y);
    });
    if (!loss.ok()) return Fail(loss.status());
    window += *loss;
    ++in_window;
    if (step % log_every == 0 || step == steps) {
      // The mean loss over ranks and the last steps.
      double mean[1] = {window / in_window};
      if (absl::Status s = group->AllReduce(
              TensorRef(mean, 1, DataType::kFloat64), ReduceOp::kMean);
          !s.ok())
        return Fail(s);
      if (first_loss < 0) first_loss = mean[0];
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      if (rank_ == 0) {
        std::printf("step %4d  loss %.4f  samples/s %.0f\n", step, mean[0],
                    double(step) * batch * world / seconds);
      }
      window = 0;
      in_window = 0;
      if (step == steps && !(mean[0] < first_loss)) {
        return Fail(absl::InternalError(absl::StrCat(
            "the loss did not fall: ", first_loss, " -> ", mean[0])));
      }
    }
  }

  // Every rank must hold exactly rank 0's parameters.
  torch::NoGradGuard no_grad;
  torch::Tensor flat = torch::cat([&] {
    std::vector<torch::Tensor> v;
    for (auto& p : model->parameters()) v.push_back(p.flatten());
    return v;
  }());
  torch::Tensor reference = flat.clone();
  if (absl::Status s =
          group->Broadcast(TensorRef(reference.data_ptr(), reference.numel(),
                                     DataType::kFloat32),
                           0);
      !s.ok())
    return Fail(s);
  const bool identical = torch::equal(flat, reference);
  // Held-out accuracy (a fresh sample, the same on every rank).
  auto held_out = at::make_generator<at::CPUGeneratorImpl>(99);
  auto [xt, yt] = task.Batch(2000, held_out);
  const double accuracy = model->forward(xt)
                              .argmax(1)
                              .eq(yt)
                              .to(torch::kFloat)
                              .mean()
                              .item<double>();
  std::printf(
      "rank %d: parameters identical to rank 0's: %s, held-out accuracy %.3f\n",
      rank_, identical ? "yes" : "NO", accuracy);
  if (!identical)
    return Fail(absl::InternalError("parameters differ across ranks"));
  if (absl::Status s = dist::Barrier(); !s.ok()) return Fail(s);
  if (rank_ == 0) {
    std::printf("main_job: done in %.1f s\n",
                absl::ToDoubleSeconds(absl::Now() - start));
  }
  dist::DestroyDist();
  return 0;
}
