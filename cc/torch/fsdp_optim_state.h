// The optimizer's state of a FullyShardedDataParallel model in full form
// (torch's FSDP.optim_state_dict / full_optim_state_dict), so it can be
// saved once and loaded by a job of any size. Under FSDP each rank's
// optimizer holds state only for its pieces of the parameters (1-D views of
// its shard); the full form gathers every per-element state tensor to its
// parameter's shape.
//
// Keys are "state.<parameter name>.<field>", the parameter names those of
// FullStateDict, the fields those of LibTorch's optimizers:
//   Adam, AdamW   step, exp_avg, exp_avg_sq, max_exp_avg_sq (amsgrad)
//   SGD           momentum_buffer (momentum != 0)
//   RMSprop       step, square_avg, momentum_buffer, grad_avg (centered)
//   Adagrad       step, sum
// `step` is a 0-d int64 tensor. The optimizer's hyperparameters (its param
// groups) are not included: the loading job constructs its optimizer with
// them, as with torch::optim's own save / load.
//
//   auto osd = FullOptimStateDict(*fsdp, *optimizer);           // collective
//   ...
//   LoadFullOptimStateDict(*fsdp2, *optimizer2, *osd);          // local

#ifndef DISTKIT_CC_TORCH_FSDP_OPTIM_STATE_H_
#define DISTKIT_CC_TORCH_FSDP_OPTIM_STATE_H_

#include <torch/optim.h>

#include <string>

#include "absl/status/statusor.h"
#include "cc/torch/fully_sharded_data_parallel.h"

namespace distkit {

// Collective over the model's group. `optimizer` steps fsdp's parameters
// (built after wrapping); it may not have stepped yet (the dict is then
// empty). rank0_only: the other ranks get an empty dict. INVALID_ARGUMENT
// for an optimizer other than those above, or when the ranks' optimizers
// disagree on which parameters have state (on every rank).
absl::StatusOr<torch::OrderedDict<std::string, torch::Tensor>>
FullOptimStateDict(FullyShardedDataParallel& fsdp,
                   torch::optim::Optimizer& optimizer, bool rank0_only = false);

// Local: gives each of `optimizer`'s parameters its piece of `state` (made
// by FullOptimStateDict at any world size), replacing what it held. A
// missing key or a tensor of the wrong size is INVALID_ARGUMENT naming it,
// and nothing is loaded.
absl::Status LoadFullOptimStateDict(
    FullyShardedDataParallel& fsdp, torch::optim::Optimizer& optimizer,
    const torch::OrderedDict<std::string, torch::Tensor>& state);

}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_FSDP_OPTIM_STATE_H_
