// One data-parallel training step: zero the gradients, broadcast buffers,
// forward and loss, backward with gradient reduction, optimizer step.

#ifndef DISTKIT_CC_TORCH_TRAIN_STEP_H_
#define DISTKIT_CC_TORCH_TRAIN_STEP_H_

#include <torch/optim/optimizer.h>

#include <functional>

#include "absl/status/statusor.h"
#include "cc/torch/distributed_data_parallel.h"
#include "cc/torch/fully_sharded_data_parallel.h"

namespace distkit {

// Returns this rank's loss. `forward_loss` runs the model and the criterion;
// an exception it throws goes on to the caller, a sharded model's gathered
// units freed first (FullyShardedDataParallel::Reshard).
absl::StatusOr<double> TrainStep(
    DistributedDataParallel& ddp, torch::optim::Optimizer& optimizer,
    const std::function<torch::Tensor()>& forward_loss);
// The same step sharded: `optimizer` steps the module's parameters (the
// shards, after FullyShardedDataParallel::Create).
absl::StatusOr<double> TrainStep(
    FullyShardedDataParallel& fsdp, torch::optim::Optimizer& optimizer,
    const std::function<torch::Tensor()>& forward_loss);

}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_TRAIN_STEP_H_
