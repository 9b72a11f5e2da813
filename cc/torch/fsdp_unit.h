// What the parts of FullyShardedDataParallel share (wrapping in
// fully_sharded_data_parallel.cc, the runtime in fsdp_runtime.cc, state dicts
// in fsdp_state_dict.cc): the unit, one FlatShard and the torch parameters
// aliased into it, and the registry through which UnitForward finds the unit
// a module is. Internal: users include fully_sharded_data_parallel.h.

#ifndef DISTKIT_CC_TORCH_FSDP_UNIT_H_
#define DISTKIT_CC_TORCH_FSDP_UNIT_H_

#include <memory>
#include <string>
#include <vector>

#include "cc/torch/fully_sharded_data_parallel.h"

namespace distkit {

// One FlatShard and the torch parameters aliased into it.
struct FullyShardedDataParallel::Unit {
  std::string name;  // module path in the owner's module ("" for the root)
  const torch::nn::Module* module = nullptr;
  FullyShardedDataParallel* owner = nullptr;
  std::unique_ptr<FlatShard> shard;
  // The original parameters (the optimizer's handles) and what they were.
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;  // relative to the owner's module
  std::vector<std::vector<int64_t>> shapes;
  std::vector<torch::ScalarType> dtypes;
  // Between steps: the parameters are piece_data[i], grads piece_grad[i].
  std::vector<torch::Tensor> piece_data;
  std::vector<torch::Tensor> piece_grad;
  // One storage per flat buffer: full views and everything autograd saved
  // from them point here, and Gather / Reshard swap its memory in and out
  // (so a saved view sees the re-gathered memory in backward).
  std::vector<c10::intrusive_ptr<c10::StorageImpl>> storages;
  torch::Device device{torch::kCPU};
  bool full_views = false;
  // While gathered for backward: each parameter's .grad is a view of the
  // engine's full gradient (FlatShard::FullGrad), so torch accumulates into
  // it in place and the reduction reads it there; grad_in_place[i] is that
  // view's address (nullptr: parameter i's gradient is copied in).
  bool grads_attached = false;
  std::vector<const void*> grad_in_place;
  bool routed = false;   // its forward runs through UnitForward
  bool finished = true;  // gradients reduced in this backward
  int expected = 0;      // AccumulateGrad calls expected in this backward
  int ready = 0;
  // Hooks hold a weak reference, so a graph that outlives the wrapper does
  // not call into freed memory.
  std::shared_ptr<Unit*> self = std::make_shared<Unit*>(this);
};

namespace fsdp_internal {

// Who errors come from.
inline constexpr char kOwner[] = "FullyShardedDataParallel";

// ---- The unit registry -----------------------------------------------------

// The unit `module` is, or nullptr.
FullyShardedDataParallel::Unit* LookupUnit(const torch::nn::Module* module);

// Makes `units` the units of their modules, and lets go of what FullyShard
// kept alive for the `adopted` modules (their units are among `units` now).
void RegisterUnits(
    const std::vector<std::unique_ptr<FullyShardedDataParallel::Unit>>& units,
    const std::vector<const torch::nn::Module*>& adopted);

// Forgets those of `units` still registered to their modules.
void UnregisterUnits(
    const std::vector<std::unique_ptr<FullyShardedDataParallel::Unit>>& units);

// What FullyShard made for `module`, kept alive (as FSDP2's state lives with
// its module) until an enclosing FullyShard or Create adopts its units.
void KeepUntilAdopted(const torch::nn::Module* module,
                      std::shared_ptr<FullyShardedDataParallel> fsdp);

}  // namespace fsdp_internal
}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_FSDP_UNIT_H_
