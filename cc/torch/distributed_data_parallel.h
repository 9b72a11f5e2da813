// Data-parallel training for LibTorch (whose C++ API has no DDP): wraps a
// torch::nn::Module, broadcasts rank 0's parameters and buffers at
// construction, and averages gradients during backward through GradReducer.
// Autograd post-hooks on each parameter's gradient accumulator mark it ready
// as soon as its gradient is final, so bucket all_reduces overlap the rest
// of backward. The averaged gradients equal torch.nn.parallel's DDP.
//
//   auto ddp = DistributedDataParallel::Create(model).value();
//   for (...) {
//     optimizer.zero_grad();
//     DK_RETURN_IF_ERROR(ddp->BeforeForward());      // broadcast_buffers
//     torch::Tensor loss = criterion(model->forward(x), y);
//     DK_RETURN_IF_ERROR(ddp->Backward(loss));       // backward + reduce
//     optimizer.step();
//   }
//
// or TrainStep() (train_step.h) for the whole step.

#ifndef DISTKIT_CC_TORCH_DISTRIBUTED_DATA_PARALLEL_H_
#define DISTKIT_CC_TORCH_DISTRIBUTED_DATA_PARALLEL_H_

// nn::Module, not all of torch/torch.h (20 s of parsing per translation
// unit; this 10).
#include <torch/nn/module.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cc/group/process_group.h"
#include "cc/parallel/grad_reducer.h"

namespace distkit {

// Marks the wrappers below (mmengine's is_model_wrapper).
class ModelWrapper {
 public:
  virtual ~ModelWrapper() = default;
  // The wrapped module.
  virtual std::shared_ptr<torch::nn::Module> wrapped() const = 0;
};

bool IsModelWrapper(const torch::nn::Module& module);

class DistributedDataParallel : public torch::nn::Module, public ModelWrapper {
 public:
  // torch's device_ids / output_device. For a module on one CUDA device,
  // device_ids = {its index} makes ToInputDevice() move inputs there (as
  // torch's forward does); a CPU module with device_ids, several entries, or
  // an index that is not the module's is INVALID_ARGUMENT (torch's text).
  // Empty: the module's device, inputs as given.
  struct Placement {
    std::vector<int> device_ids;
    std::optional<int> output_device;  // default: device_ids[0]
  };

  // Collective over `group` (nullptr: the default group). The parameters may
  // live on any one device: with a Gloo group, CUDA gradients are staged
  // through host buckets; with NCCL the buckets are device memory.
  static absl::StatusOr<std::shared_ptr<DistributedDataParallel>> Create(
      std::shared_ptr<torch::nn::Module> module,
      GradReducer::Options options = {},
      std::shared_ptr<ProcessGroup> group = nullptr, Placement placement = {});

  // Where inputs go before forward: `input` on device_ids[0] when set, else
  // unchanged.
  torch::Tensor ToInputDevice(const torch::Tensor& input) const;
  const std::vector<int>& device_ids() const { return placement_.device_ids; }
  std::optional<int> output_device() const { return placement_.output_device; }
  ~DistributedDataParallel() override;

  std::shared_ptr<torch::nn::Module> wrapped() const override {
    return module_;
  }
  template <typename M>
  std::shared_ptr<M> module_as() const {
    return std::dynamic_pointer_cast<M>(module_);
  }

  // Before each forward: broadcasts rank 0's buffers (broadcast_buffers).
  absl::Status BeforeForward();

  // Runs loss.backward(); the hooks feed the reducer; then waits for the
  // reduction and writes the averaged gradients. With find_unused_parameters
  // the graph of `loss` is searched first for parameters it does not reach;
  // one of those that already holds a gradient (an earlier Backward without
  // zero_grad) contributes it, as in torch's DDP, and keeps it when no rank
  // used the parameter.
  absl::Status Backward(const torch::Tensor& loss);

  // Backward without reducing the gradients (they accumulate locally); the
  // next Backward outside a NoSync scope reduces the accumulated values.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel* ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel* ddp_;
  };
  NoSync no_sync() { return NoSync(this); }

  // Backward in two halves, for wrappers that run one backward over several
  // DDPs: PrepareBackward (before loss.backward()) and FinishBackward.
  absl::Status PrepareBackward(const torch::Tensor& loss);
  absl::Status FinishBackward();
  // In place of FinishBackward after a backward that threw: the reducer
  // forgets the iteration (GradReducer::AbandonIteration), and a gradient
  // hook's error from it is dropped, so the next backward starts clean.
  void AbandonBackward();

  GradReducer& reducer() { return *reducer_; }
  const std::vector<torch::Tensor>& parameters_in_order() const {
    return params_;
  }

 private:
  class ReadyHook;
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module);
  absl::Status Attach(GradReducer::Options options,
                      std::shared_ptr<ProcessGroup> group);
  void OnGradReady(int index);
  absl::Status PointGradsAtViews();
  std::vector<int> UnusedParameters(const torch::Tensor& loss) const;

  std::shared_ptr<torch::nn::Module> module_;
  Placement placement_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  // Keep the accumulators (and so our hooks) alive across iterations.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  // What the hooks reach this wrapper through: reset first by the
  // destructor, so a graph that outlives the wrapper (a loss kept, backward
  // run later) finds it gone instead of freed.
  std::shared_ptr<DistributedDataParallel*> self_ =
      std::make_shared<DistributedDataParallel*>(this);
  std::unique_ptr<GradReducer> reducer_;
  int64_t view_generation_ = -1;
  absl::Mutex mu_;
  absl::Status hook_error_ ABSL_GUARDED_BY(mu_);
  // find_unused_parameters: parameters whose gradient hook ran under no_sync
  // since the last synchronized backward. One that backward does not reach
  // still contributes what it accumulated (as in torch's DDP), not a zero:
  // PrepareBackward leaves it out of the unused ones (`carried_`) and
  // FinishBackward marks it ready with its gradient.
  absl::flat_hash_set<int> accumulated_ ABSL_GUARDED_BY(mu_);
  std::vector<int> carried_;
  // Unused by this backward, holding a gradient of an earlier one:
  // contributed as it is (GradReducer::MarkUnusedReady).
  std::vector<int> held_;
};

// mmengine's MMSeparateDistributedDataParallel: every direct child with
// trainable parameters is wrapped in its own DistributedDataParallel (and
// reduced on its own); the other children are kept as they are.
class SeparateDistributedDataParallel : public torch::nn::Module,
                                        public ModelWrapper {
 public:
  static absl::StatusOr<std::shared_ptr<SeparateDistributedDataParallel>>
  Create(std::shared_ptr<torch::nn::Module> module,
         GradReducer::Options options = {},
         std::shared_ptr<ProcessGroup> group = nullptr);

  std::shared_ptr<torch::nn::Module> wrapped() const override {
    return module_;
  }
  // The DDP wrapping child `name`, or nullptr.
  std::shared_ptr<DistributedDataParallel> child(const std::string& name) const;

  absl::Status BeforeForward();
  // One backward; every wrapped child whose parameters got gradients is
  // reduced.
  absl::Status Backward(const torch::Tensor& loss);

 private:
  explicit SeparateDistributedDataParallel(
      std::shared_ptr<torch::nn::Module> module)
      : module_(std::move(module)) {}
  std::shared_ptr<torch::nn::Module> module_;
  std::vector<std::pair<std::string, std::shared_ptr<DistributedDataParallel>>>
      wrapped_children_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_DISTRIBUTED_DATA_PARALLEL_H_
