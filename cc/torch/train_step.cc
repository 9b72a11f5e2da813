#include "cc/torch/train_step.h"

#include <type_traits>

#include "cc/core/status.h"

namespace distkit {

namespace {

template <typename Wrapper>
absl::StatusOr<double> Step(
    Wrapper& wrapper, torch::optim::Optimizer& optimizer,
    const std::function<torch::Tensor()>& forward_loss) {
  optimizer.zero_grad();
  DK_RETURN_IF_ERROR(wrapper.BeforeForward());
  torch::Tensor loss;
  try {
    loss = forward_loss();
  } catch (...) {
    // A sharded model frees what the forward gathered before the exception
    // goes on (the caller may skip the batch and step the optimizer).
    if constexpr (std::is_same_v<Wrapper, FullyShardedDataParallel>) {
      wrapper.Reshard().IgnoreError();
    }
    throw;
  }
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
