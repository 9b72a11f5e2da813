#include "cc/torch/distributed_data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/torch_tensor_ref.h"

namespace distkit {

namespace {

// Any device: the reducer stages what is not on the group's comm device.
absl::StatusOr<TensorRef> Ref(const torch::Tensor& t, const std::string& what) {
  return AsTensorRef(t, "DistributedDataParallel", what);
}

// torch DDP's checks of device_ids / output_device against the module.
absl::StatusOr<DistributedDataParallel::Placement> CheckPlacement(
    const torch::nn::Module& module,
    DistributedDataParallel::Placement placement) {
  std::vector<std::string> devices;
  for (const torch::Tensor& p : module.parameters()) {
    const std::string d = p.device().str();
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) {
      devices.push_back(d);
    }
  }
  const bool on_cpu = devices.empty() || devices[0] == "cpu";
  const auto refuse = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedDataParallel device_ids and output_device arguments only "
        "work with single-device/multiple-device GPU modules or CPU modules, "
        "but got device_ids [",
        absl::StrJoin(placement.device_ids, ", "), "], output_device ",
        placement.output_device ? absl::StrCat(*placement.output_device)
                                : "None",
        ", and module parameters {", absl::StrJoin(devices, ", "), "}."));
  };
  if (devices.size() > 1) {
    if (!placement.device_ids.empty()) return refuse();
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedDataParallel: the module's parameters are on several "
        "devices (",
        absl::StrJoin(devices, ", "),
        "); a data-parallel replica must be on one device"));
  }
  if (placement.device_ids.empty()) return DistributedDataParallel::Placement{};
  if (on_cpu) return refuse();
  if (placement.device_ids.size() != 1) {
    return absl::InvalidArgumentError(
        "device_ids can only be None or contain a single element.");
  }
  const std::string want = absl::StrCat("cuda:", placement.device_ids[0]);
  if (devices[0] != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributedDataParallel: device_ids [", placement.device_ids[0],
        "] names ", want, ", but the module is on ", devices[0]));
  }
  if (!placement.output_device) {
    placement.output_device = placement.device_ids[0];
  }
  return placement;
}

}  // namespace

bool IsModelWrapper(const torch::nn::Module& module) {
  return dynamic_cast<const ModelWrapper*>(&module) != nullptr;
}

// Runs after a parameter's AccumulateGrad: its .grad is final for this
// backward (accumulated across micro-steps when under no_sync).
class DistributedDataParallel::ReadyHook
    : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(const std::shared_ptr<DistributedDataParallel*>& ddp, int index)
      : ddp_(ddp), index_(index) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    // The parameters' accumulators (and this hook) outlive the wrapper.
    if (auto ddp = ddp_.lock()) (*ddp)->OnGradReady(index_);
    return outputs;
  }

 private:
  std::weak_ptr<DistributedDataParallel*> ddp_;
  int index_;
};

DistributedDataParallel::DistributedDataParallel(
    std::shared_ptr<torch::nn::Module> module)
    : torch::nn::Module("DistributedDataParallel"),
      module_(std::move(module)) {}

DistributedDataParallel::~DistributedDataParallel() {
  self_.reset();  // the hooks stop reaching this wrapper
}

absl::StatusOr<std::shared_ptr<DistributedDataParallel>>
DistributedDataParallel::Create(std::shared_ptr<torch::nn::Module> module,
                                GradReducer::Options options,
                                std::shared_ptr<ProcessGroup> group,
                                Placement placement) {
  if (module == nullptr) {
    return absl::InvalidArgumentError("DistributedDataParallel: no module");
  }
  // Checked before any collective: every rank refuses alike.
  DK_ASSIGN_OR_RETURN(Placement checked, CheckPlacement(*module, placement));
  std::shared_ptr<DistributedDataParallel> ddp(
      new DistributedDataParallel(module));
  ddp->placement_ = std::move(checked);
  DK_RETURN_IF_ERROR(ddp->Attach(options, std::move(group)));
  return ddp;
}

absl::Status DistributedDataParallel::Attach(
    GradReducer::Options options, std::shared_ptr<ProcessGroup> group) {
  if (group == nullptr) group = dist::GetDefaultGroup();
  if (group == nullptr) {
    return absl::FailedPreconditionError(
        "DistributedDataParallel: distkit is not initialized (call "
        "dist::InitDist first)");
  }
  register_module("module", module_);
  std::vector<GradReducer::Parameter> reducer_params;
  for (const auto& item : module_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    DK_ASSIGN_OR_RETURN(TensorRef ref, Ref(item.value(), item.key()));
    params_.push_back(item.value());
    names_.push_back(item.key());
    reducer_params.push_back({ref, item.key()});
  }
  std::vector<TensorRef> buffers;
  for (const auto& item : module_->named_buffers()) {
    DK_ASSIGN_OR_RETURN(TensorRef ref, Ref(item.value(), item.key()));
    buffers.push_back(ref);
  }
  {
    torch::NoGradGuard no_grad;  // the broadcast writes leaf parameters
    DK_ASSIGN_OR_RETURN(
        reducer_,
        GradReducer::Create(std::move(group), std::move(reducer_params),
                            std::move(buffers), options));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    acc->add_post_hook(std::make_unique<ReadyHook>(self_, static_cast<int>(i)));
    accumulators_.push_back(std::move(acc));
  }
  return absl::OkStatus();
}

void DistributedDataParallel::OnGradReady(int index) {
  if (!reducer_->require_sync()) {
    if (reducer_->options().find_unused_parameters) {
      absl::MutexLock lock(&mu_);
      accumulated_.insert(index);
    }
    return;  // no_sync: the gradient stays where autograd accumulates it
  }
  const torch::Tensor& grad = params_[index].grad();
  absl::Status s;
  if (!grad.defined()) {
    s = absl::InternalError(absl::StrCat(
        "DistributedDataParallel: ", names_[index], " has no gradient"));
  } else {
    absl::StatusOr<TensorRef> ref = Ref(grad, names_[index] + ".grad");
    s = ref.ok() ? reducer_->MarkReady(index, *ref) : ref.status();
  }
  if (!s.ok()) {
    absl::MutexLock lock(&mu_);
    if (hook_error_.ok()) hook_error_ = s;
  }
}

torch::Tensor DistributedDataParallel::ToInputDevice(
    const torch::Tensor& input) const {
  if (placement_.device_ids.empty()) return input;
  return input.to(torch::Device(torch::kCUDA, placement_.device_ids[0]));
}

absl::Status DistributedDataParallel::BeforeForward() {
  if (reducer_->options().broadcast_buffers && reducer_->require_sync()) {
    torch::NoGradGuard no_grad;
    return reducer_->BroadcastBuffers();
  }
  return absl::OkStatus();
}

absl::Status DistributedDataParallel::PointGradsAtViews() {
  // gradient_as_bucket_view: .grad must be the bucket's memory before
  // backward, so AccumulateGrad adds into it in place.
  if (!reducer_->options().gradient_as_bucket_view) return absl::OkStatus();
  for (size_t i = 0; i < params_.size(); ++i) {
    DK_ASSIGN_OR_RETURN(TensorRef view, reducer_->GradView(i));
    torch::Tensor& grad = params_[i].mutable_grad();
    if (grad.defined() && grad.data_ptr() == view.data()) continue;
    torch::Tensor v =
        torch::from_blob(view.data(), params_[i].sizes(),
                         params_[i].options().requires_grad(false));
    if (grad.defined()) {
      v.copy_(grad);
    } else {
      v.zero_();
    }
    grad = v;
  }
  return absl::OkStatus();
}

std::vector<int> DistributedDataParallel::UnusedParameters(
    const torch::Tensor& loss) const {
  // Every AccumulateGrad node reachable from the loss belongs to a used
  // parameter (torch's DDP searches the graph the same way).
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  if (loss.grad_fn()) stack.push_back(loss.grad_fn().get());
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function.get());
    }
  }
  std::vector<int> unused;
  for (size_t i = 0; i < accumulators_.size(); ++i) {
    if (!seen.count(accumulators_[i].get())) unused.push_back(i);
  }
  return unused;
}

absl::Status DistributedDataParallel::PrepareBackward(
    const torch::Tensor& loss) {
  DK_RETURN_IF_ERROR(PointGradsAtViews());
  if (reducer_->require_sync() && reducer_->options().find_unused_parameters) {
    std::vector<int> unused;
    carried_.clear();
    held_.clear();
    {
      absl::MutexLock lock(&mu_);
      for (int i : UnusedParameters(loss)) {
        if (!params_[i].grad().defined()) {
          unused.push_back(i);
        } else if (accumulated_.contains(i)) {
          carried_.push_back(i);
        } else {
          // A gradient from an earlier backward (not zeroed): torch's DDP
          // contributes it, and the parameter still counts as unused here.
          held_.push_back(i);
        }
      }
    }
    return reducer_->PrepareForBackward(unused);
  }
  // Begins the iteration here, on the caller's thread, which its buckets
  // are then issued as (the reducer's issuer), also where autograd runs
  // the hooks on the device's thread.
  return reducer_->PrepareForBackward();
}

void DistributedDataParallel::AbandonBackward() {
  {
    absl::MutexLock lock(&mu_);
    hook_error_ = absl::OkStatus();
  }
  carried_.clear();
  held_.clear();
  reducer_->AbandonIteration();
}

absl::Status DistributedDataParallel::FinishBackward() {
  {
    absl::MutexLock lock(&mu_);
    if (!hook_error_.ok()) {
      absl::Status s = hook_error_;
      hook_error_ = absl::OkStatus();
      reducer_->Finalize().IgnoreError();
      return s;
    }
  }
  if (!reducer_->require_sync()) return absl::OkStatus();
  // Unreached by this backward, accumulated under no_sync: this rank's
  // contribution is that gradient.
  absl::Status carried_status;
  for (int i : carried_) {
    absl::StatusOr<TensorRef> ref = Ref(params_[i].grad(), names_[i] + ".grad");
    carried_status = ref.ok() ? reducer_->MarkReady(i, *ref) : ref.status();
    if (!carried_status.ok()) break;
  }
  for (int i : held_) {
    if (!carried_status.ok()) break;
    absl::StatusOr<TensorRef> ref = Ref(params_[i].grad(), names_[i] + ".grad");
    carried_status =
        ref.ok() ? reducer_->MarkUnusedReady(i, *ref) : ref.status();
  }
  carried_.clear();
  held_.clear();
  if (!carried_status.ok()) {
    // As after a hook's error: the missing gradients go as zeros, so the
    // peers' buckets complete.
    reducer_->Finalize().IgnoreError();
    return carried_status;
  }
  DK_RETURN_IF_ERROR(reducer_->Finalize());
  {
    absl::MutexLock lock(&mu_);
    accumulated_.clear();
  }
  torch::NoGradGuard no_grad;
  if (reducer_->options().find_unused_parameters) {
    // A parameter unused here but used elsewhere gets the averaged gradient.
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!reducer_->globally_used(i)) continue;
      torch::Tensor& grad = params_[i].mutable_grad();
      DK_ASSIGN_OR_RETURN(TensorRef reduced, reducer_->ReducedGrad(i));
      if (grad.defined() && grad.data_ptr() == reduced.data()) continue;
      // The reduced gradient lives on the group's comm device.
      torch::Tensor src =
          torch::from_blob(reduced.data(), params_[i].sizes(),
                           params_[i]
                               .options()
                               .device(TorchDeviceOf(reduced.device()))
                               .requires_grad(false));
      if (!grad.defined()) {
        // On the parameter's device (a CUDA parameter's gradient from a
        // host group's bucket must not stay on the host).
        grad = src.to(src.options().device(params_[i].device()),
                      /*non_blocking=*/false, /*copy=*/true);
      } else {
        grad.copy_(src);
      }
    }
  }
  if (reducer_->options().gradient_as_bucket_view &&
      reducer_->view_generation() != view_generation_) {
    view_generation_ = reducer_->view_generation();
    DK_RETURN_IF_ERROR(PointGradsAtViews());
  }
  return absl::OkStatus();
}

absl::Status DistributedDataParallel::Backward(const torch::Tensor& loss) {
  DK_RETURN_IF_ERROR(PrepareBackward(loss));
  try {
    loss.backward();
  } catch (const std::exception& e) {
    // The reducer must not carry this iteration into the next one.
    AbandonBackward();
    return absl::InternalError(absl::StrCat("backward failed: ", e.what()));
  }
  return FinishBackward();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel* ddp)
    : ddp_(ddp) {
  ddp_->reducer_->set_require_sync(false);
}

DistributedDataParallel::NoSync::~NoSync() {
  ddp_->reducer_->set_require_sync(true);
}

absl::StatusOr<std::shared_ptr<SeparateDistributedDataParallel>>
SeparateDistributedDataParallel::Create(
    std::shared_ptr<torch::nn::Module> module, GradReducer::Options options,
    std::shared_ptr<ProcessGroup> group) {
  if (module == nullptr) {
    return absl::InvalidArgumentError(
        "SeparateDistributedDataParallel: no module");
  }
  std::shared_ptr<SeparateDistributedDataParallel> sep(
      new SeparateDistributedDataParallel(module));
  for (const auto& child : module->named_children()) {
    bool trainable = false;
    for (const auto& p : child.value()->parameters())
      trainable |= p.requires_grad();
    if (!trainable) {
      sep->register_module(child.key(), child.value());
      continue;
    }
    DK_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(
                                      child.value(), options, group));
    sep->register_module(child.key(), ddp);
    sep->wrapped_children_.emplace_back(child.key(), ddp);
  }
  return sep;
}

std::shared_ptr<DistributedDataParallel> SeparateDistributedDataParallel::child(
    const std::string& name) const {
  for (const auto& [n, ddp] : wrapped_children_)
    if (n == name) return ddp;
  return nullptr;
}

absl::Status SeparateDistributedDataParallel::BeforeForward() {
  for (auto& [name, ddp] : wrapped_children_)
    DK_RETURN_IF_ERROR(ddp->BeforeForward());
  return absl::OkStatus();
}

absl::Status SeparateDistributedDataParallel::Backward(
    const torch::Tensor& loss) {
  for (auto& [name, ddp] : wrapped_children_)
    DK_RETURN_IF_ERROR(ddp->PrepareBackward(loss));
  try {
    loss.backward();
  } catch (const std::exception& e) {
    // No child's reducer may carry this iteration into the next one.
    for (auto& [name, ddp] : wrapped_children_) ddp->AbandonBackward();
    return absl::InternalError(absl::StrCat("backward failed: ", e.what()));
  }
  absl::Status status;
  for (auto& [name, ddp] : wrapped_children_) {
    if (ddp->reducer().iteration_started())
      status.Update(ddp->FinishBackward());
  }
  return status;
}

}  // namespace distkit
