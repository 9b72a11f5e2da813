#include "cc/torch/train_step.h"

#include "cc/core/status.h"

namespace distkit {

absl::StatusOr<double> TrainStep(
    DistributedDataParallel& ddp, torch::optim::Optimizer& optimizer,
    const std::function<torch::Tensor()>& forward_loss) {
  optimizer.zero_grad();
  DK_RETURN_IF_ERROR(ddp.BeforeForward());
  torch::Tensor loss = forward_loss();
  DK_RETURN_IF_ERROR(ddp.Backward(loss));
  optimizer.step();
  return loss.item<double>();
}

}  // namespace distkit
