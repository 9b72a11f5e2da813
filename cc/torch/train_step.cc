#include "cc/torch/train_step.h"

#include "cc/core/status.h"

namespace distkit {

namespace {

template <typename Wrapper>
absl::StatusOr<double> Step(
    Wrapper& wrapper, torch::optim::Optimizer& optimizer,
    const std::function<torch::Tensor()>& forward_loss) {
  optimizer.zero_grad();
  DK_RETURN_IF_ERROR(wrapper.BeforeForward());
  torch::Tensor loss = forward_loss();
  DK_RETURN_IF_ERROR(wrapper.Backward(loss));
  optimizer.step();
  return loss.item<double>();
}

}  // namespace

absl::StatusOr<double> TrainStep(
    DistributedDataParallel& ddp, torch::optim::Optimizer& optimizer,
    const std::function<torch::Tensor()>& forward_loss) {
  return Step(ddp, optimizer, forward_loss);
}

absl::StatusOr<double> TrainStep(
    FullyShardedDataParallel& fsdp, torch::optim::Optimizer& optimizer,
    const std::function<torch::Tensor()>& forward_loss) {
  return Step(fsdp, optimizer, forward_loss);
}

}  // namespace distkit
