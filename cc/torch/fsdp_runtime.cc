// The runtime: what runs during training. Gathering and freeing units
// (parameters as full views of the gathered buffer, or as shard pieces),
// UnitForward's gather / free around a unit's forward, the hooks that
// gather a unit again before its backward and reduce its gradients once
// they are complete, and the prefetch that overlaps the next gather.

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cc/core/device_staging.h"
#include "cc/core/host_staging.h"
#include "cc/core/status.h"
#include "cc/group/issuer.h"
#include "cc/torch/fsdp_unit.h"
#include "cc/torch/fully_sharded_data_parallel.h"
#include "cc/torch/torch_tensor_ref.h"

namespace distkit {

using fsdp_internal::kOwner;

// ---- Hooks ------------------------------------------------------------------

// Runs after a parameter's AccumulateGrad: its gradient for this backward
// is complete.
class FullyShardedDataParallel::GradReadyHook
    : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(const Unit& unit, int index)
      : unit_(unit.self), index_(index) {}
  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    if (auto unit = unit_.lock()) (*unit)->owner->OnGradReady(*unit, index_);
    return outputs;
  }
  bool Hooks(const Unit* unit, int index) const {
    auto u = unit_.lock();
    return u != nullptr && *u == unit && index_ == index;
  }

 private:
  std::weak_ptr<Unit*> unit_;
  int index_;
};

// ---- Views ------------------------------------------------------------------

absl::Status FullyShardedDataParallel::UseFullViews(Unit& unit) {
  torch::NoGradGuard no_grad;
  for (int k = 0; k < unit.shard->num_flat(); ++k) {
    DK_ASSIGN_OR_RETURN(TensorRef full, unit.shard->FullFlat(k));
    c10::StorageImpl& storage = *unit.storages[k];
    storage.set_data_ptr_noswap(at::DataPtr(full.data(), unit.device));
    storage.set_nbytes(full.nbytes());
  }
  for (size_t i = 0; i < unit.params.size(); ++i) {
    const FlatShard::Placement& p = unit.shard->placement(i);
    DK_ASSIGN_OR_RETURN(TensorRef full, unit.shard->FullFlat(p.flat));
    torch::Tensor view =
        torch::empty({0}, torch::TensorOptions()
                              .dtype(ScalarTypeOf(full.dtype()))
                              .device(unit.device));
    view.set_(c10::Storage(unit.storages[p.flat]), p.offset, unit.shapes[i],
              c10::contiguous_strides(unit.shapes[i]));
    unit.params[i].mutable_grad().reset();
    unit.params[i].set_data(view);
  }
  unit.full_views = true;
  unit.grads_attached = false;
  return absl::OkStatus();
}

void FullyShardedDataParallel::UsePieceViews(Unit& unit, bool with_grads) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < unit.params.size(); ++i) {
    unit.params[i].set_data(unit.piece_data[i]);
    if (with_grads) {
      unit.params[i].mutable_grad() = unit.piece_grad[i];
    } else {
      unit.params[i].mutable_grad().reset();
    }
  }
  // Anything still pointing at the full memory now sees an empty storage,
  // not freed memory.
  for (auto& storage : unit.storages) {
    storage->set_data_ptr_noswap(at::DataPtr(nullptr, unit.device));
    storage->set_nbytes(0);
  }
  unit.full_views = false;
  unit.grads_attached = false;
  unit.grad_in_place.clear();
}

absl::Status FullyShardedDataParallel::AttachFullGrads(Unit& unit) {
  if (unit.grads_attached || !unit.full_views) return absl::OkStatus();
  torch::NoGradGuard no_grad;
  unit.grad_in_place.assign(unit.params.size(), nullptr);
  for (size_t i = 0; i < unit.params.size(); ++i) {
    torch::Tensor& param = unit.params[i];
    if (!param.requires_grad()) continue;
    DK_ASSIGN_OR_RETURN(TensorRef full, unit.shard->FullGrad(i));
    if (ScalarTypeOf(full.dtype()) != param.scalar_type()) continue;  // copied
    param.mutable_grad() = torch::from_blob(
        full.data(), unit.shapes[i],
        torch::TensorOptions().dtype(param.scalar_type()).device(unit.device));
    unit.grad_in_place[i] = full.data();
  }
  unit.grads_attached = true;
  Account();
  return absl::OkStatus();
}

absl::Status FullyShardedDataParallel::Gather(Unit& unit) {
  if (unit.full_views) return absl::OkStatus();
  DK_RETURN_IF_ERROR(unit.shard->Unshard());
  DK_RETURN_IF_ERROR(UseFullViews(unit));
  Account();
  return absl::OkStatus();
}

void FullyShardedDataParallel::StartGather(Unit* unit) {
  if (unit == nullptr || unit->full_views) return;
  absl::Status s = unit->shard->StartUnshard();
  if (!s.ok()) RecordError(s);
}

absl::Status FullyShardedDataParallel::FreeUnit(Unit& unit, bool with_grads) {
  DK_RETURN_IF_ERROR(unit.shard->Reshard());
  UsePieceViews(unit, with_grads);
  return absl::OkStatus();
}

// ---- The iteration ----------------------------------------------------------

absl::Status FullyShardedDataParallel::TakeBackGrads(Unit& unit) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < unit.params.size(); ++i) {
    torch::Tensor& grad = unit.params[i].mutable_grad();
    torch::Tensor& mine = unit.piece_grad[i];
    if (!grad.defined()) {
      mine.zero_();  // zero_grad(set_to_none)
    } else if (grad.numel() > 0 && grad.data_ptr() != mine.data_ptr()) {
      if (grad.numel() != mine.numel()) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOwner, ": the gradient of ", unit.names[i], " has ", grad.numel(),
            " elements; this rank's shard of it has ", mine.numel()));
      }
      mine.copy_(grad.reshape({-1}));
    }
    grad.reset();
  }
  return absl::OkStatus();
}

absl::Status FullyShardedDataParallel::BeforeForward() {
  DK_RETURN_IF_ERROR(TakeError());
  if (absorbed_) {
    return absl::FailedPreconditionError(absl::StrCat(
        kOwner,
        ": this module's units were adopted by the FullyShard call "
        "on an enclosing module; drive that one"));
  }
  if (in_iteration_) {
    // A forward without backward before (evaluation): free what it held.
    DK_RETURN_IF_ERROR(Reshard());
  }
  for (auto& unit : units_) {
    if (!unit->full_views) DK_RETURN_IF_ERROR(TakeBackGrads(*unit));
  }
  forward_order_.clear();
  in_iteration_ = true;
  // Units UnitForward does not gather: start all, then wait in order.
  std::vector<Unit*> now;
  for (auto& unit : units_) {
    if (first_iteration_ || !unit->routed) now.push_back(unit.get());
  }
  for (Unit* unit : now) StartGather(unit);
  DK_RETURN_IF_ERROR(TakeError());
  for (Unit* unit : now) DK_RETURN_IF_ERROR(Gather(*unit));
  return absl::OkStatus();
}

FullyShardedDataParallel::Unit* FullyShardedDataParallel::NextInForward(
    const Unit* unit, int step) const {
  // step +1: the unit after `unit`'s first run in the last forward; -1: the
  // one before it in this forward (the next to run backward).
  const std::vector<Unit*>& order =
      step > 0 ? last_forward_order_ : forward_order_;
  auto it = std::find(order.begin(), order.end(), unit);
  if (it == order.end()) return nullptr;
  if (step > 0) return std::next(it) == order.end() ? nullptr : *std::next(it);
  return it == order.begin() ? nullptr : *std::prev(it);
}

torch::Tensor FullyShardedDataParallel::RunUnitForward(
    Unit* unit, const std::function<torch::Tensor()>& forward) {
  if (!in_iteration_) {
    TORCH_CHECK(unit->full_views, kOwner,
                ": call BeforeForward() before the "
                "forward (unit '",
                unit->name, "' is sharded)");
    return forward();
  }
  unit->routed = true;
  absl::Status s = Gather(*unit);
  TORCH_CHECK(s.ok(), kOwner, ": gathering unit '", unit->name,
              "' failed: ", s.ToString());
  forward_order_.push_back(unit);
  if (options_.forward_prefetch) {
    StartGather(NextInForward(unit, +1));
  }
  torch::Tensor out = forward();
  const bool grad = torch::GradMode::is_enabled() && out.requires_grad();
  if (grad) {
    std::weak_ptr<Unit*> weak = unit->self;
    out.register_hook([weak](const torch::Tensor&) {
      if (auto u = weak.lock()) (*u)->owner->OnPreBackward(*u);
    });
  }
  if (ReshardsAfterForward(options_.sharding_strategy) || !grad) {
    s = FreeUnit(*unit, /*with_grads=*/false);
    TORCH_CHECK(s.ok(), kOwner, ": freeing unit '", unit->name,
                "' failed: ", s.ToString());
  }
  return out;
}

void FullyShardedDataParallel::OnPreBackward(Unit* unit) {
  if (unit->finished) return;
  const IssuerScope as(backward_issuer_);
  absl::Status s = Gather(*unit);
  if (s.ok()) s = AttachFullGrads(*unit);
  if (!s.ok()) {
    RecordError(s);
    TORCH_CHECK(false, kOwner, ": gathering unit '", unit->name,
                "' for backward failed: ", s.ToString());
  }
  if (options_.backward_prefetch == BackwardPrefetch::kBackwardPre) {
    Unit* next = NextInForward(unit, -1);
    if (next != nullptr && !next->finished) StartGather(next);
  }
}

void FullyShardedDataParallel::OnGradReady(Unit* unit, int index) {
  const IssuerScope as(backward_issuer_);
  torch::Tensor& grad = unit->params[index].mutable_grad();
  absl::Status s;
  if (!grad.defined()) {
    s = absl::InternalError(
        absl::StrCat(kOwner, ": ", unit->names[index], " has no gradient"));
  } else {
    // The previous unit's reduction ran while this unit's first gradients
    // were computed; finish it now (this unit's full gradients were
    // allocated at its pre-backward hook, so at most two units' full
    // gradients are held: one being written, one being reduced).
    if (reducing_ != nullptr && reducing_ != unit) s = CompleteReduction();
    const bool attached =
        static_cast<size_t>(index) < unit->grad_in_place.size() &&
        unit->grad_in_place[index] != nullptr;
    const bool in_place =
        attached && grad.data_ptr() == unit->grad_in_place[index];
    if (!in_place) {
      torch::Tensor g = grad.contiguous();
      absl::StatusOr<TensorRef> ref =
          AsTensorRef(g, kOwner, unit->names[index] + ".grad");
      if (s.ok() && !ref.ok()) s = ref.status();
      if (s.ok() && attached) {
        // torch replaced the attached .grad by its sum with the new
        // gradient, out of place (autograd was recording): that sum is the
        // whole gradient, so it replaces the buffer's contents.
        absl::StatusOr<TensorRef> full = unit->shard->FullGrad(index);
        s = full.ok() ? CastInto(*full, *ref) : full.status();
      } else if (s.ok()) {
        s = unit->shard->AccumulateGrad(index, *ref);
      }
      ++grad_copies_;
    }
    // A second AccumulateGrad of this parameter (used under two dtypes)
    // makes a new .grad, which is copied.
    if (static_cast<size_t>(index) < unit->grad_in_place.size()) {
      unit->grad_in_place[index] = nullptr;
    }
    grad.reset();
  }
  if (s.ok() && ++unit->ready == unit->expected) s = FinishUnit(*unit);
  if (!s.ok()) {
    RecordError(s);
    TORCH_CHECK(false, s.ToString());
  }
}

absl::Status FullyShardedDataParallel::FinishUnit(Unit& unit) {
  // The unit's gradients are complete: free its full parameters and start
  // reducing its gradients, which runs while backward computes the next
  // unit's first gradients (OnGradReady finishes it before that unit's
  // full gradients are allocated). At most one reduction is in flight.
  unit.finished = true;
  DK_RETURN_IF_ERROR(FreeUnit(unit, /*with_grads=*/false));
  if (options_.backward_prefetch == BackwardPrefetch::kBackwardPost) {
    Unit* next = NextInForward(&unit, -1);
    if (next != nullptr && !next->finished) StartGather(next);
  }
  DK_RETURN_IF_ERROR(CompleteReduction());
  DK_RETURN_IF_ERROR(unit.shard->StartReduceScatterGrads());
  reducing_ = &unit;
  Account();
  return absl::OkStatus();
}

absl::Status FullyShardedDataParallel::CompleteReduction() {
  if (reducing_ == nullptr) return absl::OkStatus();
  Unit& unit = *reducing_;
  reducing_ = nullptr;
  absl::Status s = unit.shard->WaitReduceScatterGrads();
  UsePieceViews(unit, /*with_grads=*/true);
  return s;
}

absl::Status FullyShardedDataParallel::PrepareBackward(
    const torch::Tensor& loss) {
  absl::flat_hash_map<const c10::TensorImpl*, std::pair<Unit*, int>> index;
  for (auto& unit : units_) {
    unit->expected = 0;
    unit->ready = 0;
    unit->finished = false;
    for (size_t i = 0; i < unit->params.size(); ++i) {
      index[unit->params[i].unsafeGetTensorImpl()] = {unit.get(),
                                                      static_cast<int>(i)};
    }
  }
  // Each AccumulateGrad node of a unit's parameter reachable from the loss
  // will report once (a parameter used under two dtypes has two).
  std::vector<std::shared_ptr<torch::autograd::Node>> reached;
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<std::shared_ptr<torch::autograd::Node>> stack;
  if (loss.grad_fn()) stack.push_back(loss.grad_fn());
  while (!stack.empty()) {
    auto node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    if (auto* acc =
            dynamic_cast<torch::autograd::AccumulateGrad*>(node.get())) {
      auto it = index.find(acc->variable.unsafeGetTensorImpl());
      if (it != index.end()) {
        auto [unit, i] = it->second;
        ++unit->expected;
        bool hooked = false;
        for (const auto& h : node->post_hooks()) {
          auto* ours = dynamic_cast<GradReadyHook*>(h.get());
          hooked |= ours != nullptr && ours->Hooks(unit, i);
        }
        if (!hooked)
          node->add_post_hook(std::make_unique<GradReadyHook>(*unit, i));
        reached.push_back(node);
      }
    }
    for (const auto& edge : node->next_edges()) {
      if (edge.function) stack.push_back(edge.function);
    }
  }
  hooked_ = std::move(reached);
  return absl::OkStatus();
}

absl::Status FullyShardedDataParallel::Backward(const torch::Tensor& loss) {
  if (!in_iteration_) {
    return absl::FailedPreconditionError(
        absl::StrCat(kOwner, ": Backward without BeforeForward"));
  }
  DK_RETURN_IF_ERROR(PrepareBackward(loss));
  backward_issuer_ = CurrentIssuer();
  // The root unit stays gathered through backward and gets no pre-backward
  // hook: its gradients go in place from the start. (Blocks gathered by
  // BeforeForward alone are copied, so that their full gradients are not
  // all allocated at once.)
  for (auto& unit : units_) {
    if (unit->name.empty()) DK_RETURN_IF_ERROR(AttachFullGrads(*unit));
  }
  absl::Status status;
  try {
    loss.backward();
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("backward failed: ", e.what()));
  }
  absl::Status hook_error = TakeError();
  if (!hook_error.ok()) status = hook_error;
  // Units whose parameters got no gradient here (or not all of them)
  // reduce now, in unit order (the same on every rank).
  for (auto& unit : units_) {
    if (!status.ok()) break;
    if (!unit->finished) status = FinishUnit(*unit);
  }
  status.Update(CompleteReduction());
  if (!status.ok()) {
    // Leave every unit sharded, so the model is consistent again, and drop
    // the partial full gradients: they would be added into the next step's
    // (zero_grad reaches only the shard gradients).
    for (auto& unit : units_) {
      unit->finished = true;
      if (unit->full_views) FreeUnit(*unit, true).IgnoreError();
      unit->shard->DiscardFullGrads();
    }
  }
  status.Update(DropUnusedGathers());
  in_iteration_ = false;
  first_iteration_ = false;
  last_forward_order_ = forward_order_;
  hooked_.clear();
  return status;
}

namespace {

// max(a, b), NaN when either is (std::max(a, NaN) is a).
double MaxKeepingNan(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
}

}  // namespace

absl::StatusOr<double> FullyShardedDataParallel::ClipGradNorm(
    double max_norm, double norm_type) {
  if (!(norm_type > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": ClipGradNorm's norm_type must be positive or inf, got ",
        norm_type));
  }
  DK_RETURN_IF_ERROR(RequireSharded("ClipGradNorm"));
  const bool inf = std::isinf(norm_type);
  // The gradients the optimizer sees: each unit's parameters' (this rank's
  // pieces where the unit is split over ranks) and the unsharded ones'.
  std::vector<torch::Tensor> grads;
  // Of the p-th powers' sum (the maximum for inf), in float64: the parts of
  // sharded gradients, summed over the group below, and whole ones.
  double parts[2] = {0, 0};
  bool any_sharded = false;
  auto add = [&](const torch::Tensor& grad, bool sharded) {
    if (!grad.defined()) return;
    grads.push_back(grad);
    if (grad.numel() == 0) return;
    const torch::Tensor g = grad.detach().to(torch::kDouble);
    const double v =
        inf ? g.abs().max().item<double>()
            : std::pow(g.norm(norm_type).item<double>(), norm_type);
    double& part = parts[sharded ? 0 : 1];
    // A NaN gradient makes the norm NaN, as torch's: std::max would drop it.
    part = inf ? MaxKeepingNan(part, v) : part + v;
  };
  for (const auto& unit : units_) {
    const bool sharded = unit->shard->shard_count() > 1;
    any_sharded |= sharded;
    for (const auto& p : unit->params) add(p.grad(), sharded);
  }
  for (const auto& [key, p] : unsharded_params_) add(p.grad(), false);
  // Every rank of a model has the same units, so all or none reduce.
  if (any_sharded) {
    // A maximum compares, and every comparison with NaN is false: one rank's
    // NaN would vanish in the reduction. It travels as a flag beside the
    // value (a sum keeps NaN by itself).
    const bool nan = std::isnan(parts[0]);
    double reduced[2] = {inf && nan ? 0.0 : parts[0], nan ? 1.0 : 0.0};
    // Staged onto the comm device: an NCCL group takes no host memory.
    DK_RETURN_IF_ERROR(OnCommDevice(
        TensorRef(reduced, inf ? 2 : 1, DataType::kFloat64),
        group_->comm_device(), Access::kReadWrite, [&](const TensorRef& t) {
          return group_->AllReduce(t, inf ? ReduceOp::kMax : ReduceOp::kSum);
        }));
    parts[0] = inf && reduced[1] > 0 ? std::nan("") : reduced[0];
  }
  const double total = inf ? MaxKeepingNan(parts[0], parts[1])
                           : std::pow(parts[0] + parts[1], 1.0 / norm_type);
  // torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6), at
  // most 1; NaN when the norm is (torch's clamp keeps it, std::min would
  // give 1), so every gradient becomes NaN as under torch.
  const double factor = max_norm / (total + 1e-6);
  const double coefficient =
      std::isnan(factor) ? factor : std::min(1.0, factor);
  torch::NoGradGuard no_grad;
  for (auto& g : grads) g.mul_(coefficient);
  return total;
}

absl::Status FullyShardedDataParallel::Reshard() {
  absl::Status status;
  for (auto& unit : units_) {
    if (unit->full_views) status.Update(FreeUnit(*unit, /*with_grads=*/true));
  }
  status.Update(DropUnusedGathers());
  if (in_iteration_) {
    in_iteration_ = false;
    first_iteration_ = false;
    last_forward_order_ = forward_order_;
  }
  Account();
  return status;
}

absl::Status FullyShardedDataParallel::DropUnusedGathers() {
  absl::Status status;
  for (auto& unit : units_) {
    // Waits for a gather in flight and frees it; nothing where none is.
    if (!unit->full_views) status.Update(unit->shard->Reshard());
  }
  return status;
}

FullyShardedDataParallel::NoSync::NoSync(FullyShardedDataParallel* fsdp)
    : fsdp_(fsdp) {
  for (auto& unit : fsdp_->units_) unit->shard->set_require_sync(false);
}

FullyShardedDataParallel::NoSync::~NoSync() {
  for (auto& unit : fsdp_->units_) unit->shard->set_require_sync(true);
}

void FullyShardedDataParallel::RecordError(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (error_.ok()) error_ = status;
}

absl::Status FullyShardedDataParallel::TakeError() {
  absl::MutexLock lock(&mu_);
  absl::Status s = error_;
  error_ = absl::OkStatus();
  return s;
}

// ---- UnitForward ------------------------------------------------------------

torch::Tensor UnitForward(const torch::nn::Module& module,
                          const std::function<torch::Tensor()>& forward) {
  FullyShardedDataParallel::Unit* unit = fsdp_internal::LookupUnit(&module);
  if (unit == nullptr) return forward();
  return unit->owner->RunUnitForward(unit, forward);
}

}  // namespace distkit
