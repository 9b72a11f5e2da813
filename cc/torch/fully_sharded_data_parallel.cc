#include "cc/torch/fully_sharded_data_parallel.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/serialize.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <unordered_map>
#include <unordered_set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/torch_tensor_ref.h"

namespace distkit {

namespace {

constexpr char kOwner[] = "FullyShardedDataParallel";

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : absl::StrCat(prefix, ".", name);
}

}  // namespace

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
  bool routed = false;   // its forward runs through UnitForward
  bool finished = true;  // gradients reduced in this backward
  int expected = 0;      // AccumulateGrad calls expected in this backward
  int ready = 0;
  // Hooks hold a weak reference, so a graph that outlives the wrapper does
  // not call into freed memory.
  std::shared_ptr<Unit*> self = std::make_shared<Unit*>(this);
};

// ---- The unit registry (UnitForward's lookup) -------------------------------

namespace {

absl::Mutex registry_mu;
absl::flat_hash_map<const torch::nn::Module*, FullyShardedDataParallel::Unit*>&
Registry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* registry =
      new absl::flat_hash_map<const torch::nn::Module*,
                              FullyShardedDataParallel::Unit*>();
  return *registry;
}

FullyShardedDataParallel::Unit* LookupUnit(const torch::nn::Module* module) {
  absl::MutexLock lock(&registry_mu);
  auto it = Registry().find(module);
  return it == Registry().end() ? nullptr : it->second;
}

// What FullyShard made, kept alive (as FSDP2's state lives with its module)
// until an enclosing FullyShard or Create adopts its units.
absl::flat_hash_map<const torch::nn::Module*,
                    std::shared_ptr<FullyShardedDataParallel>>&
Unadopted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* unadopted =
      new absl::flat_hash_map<const torch::nn::Module*,
                              std::shared_ptr<FullyShardedDataParallel>>();
  return *unadopted;
}

}  // namespace

// ---- Policies ---------------------------------------------------------------

AutoWrapPolicy ModuleTypePolicy(std::vector<std::string> type_names) {
  return [type_names = std::move(type_names)](const torch::nn::Module& module,
                                              const std::string&, int64_t) {
    // name() is the demangled class name, with its namespaces; a name
    // given without them matches in any namespace.
    const std::string& full = module.name();
    for (const std::string& t : type_names) {
      if (full == t || absl::EndsWith(full, absl::StrCat("::", t))) return true;
    }
    return false;
  };
}

AutoWrapPolicy SizeBasedPolicy(int64_t min_num_params) {
  return [min_num_params](const torch::nn::Module&, const std::string&,
                          int64_t unwrapped_numel) {
    return unwrapped_numel >= min_num_params;
  };
}

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

// ---- Construction -----------------------------------------------------------

FullyShardedDataParallel::FullyShardedDataParallel(
    std::shared_ptr<torch::nn::Module> module, FsdpOptions options,
    std::shared_ptr<ProcessGroup> group)
    : torch::nn::Module(kOwner),
      module_(std::move(module)),
      options_(std::move(options)),
      group_(std::move(group)) {}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  absl::MutexLock lock(&registry_mu);
  for (auto& unit : units_) {
    auto it = Registry().find(unit->module);
    if (it != Registry().end() && it->second == unit.get()) {
      Registry().erase(it);
    }
  }
}

absl::StatusOr<std::shared_ptr<FullyShardedDataParallel>>
FullyShardedDataParallel::Create(std::shared_ptr<torch::nn::Module> module,
                                 FsdpOptions options,
                                 std::shared_ptr<ProcessGroup> group) {
  if (module == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kOwner, ": no module"));
  }
  if (group == nullptr) group = dist::GetDefaultGroup();
  if (group == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        kOwner, ": distkit is not initialized (call dist::InitDist first)"));
  }
  if (IsModelWrapper(*module)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": the module is already wrapped (", module->name(), ")"));
  }
  if (Unit* unit = LookupUnit(module.get());
      unit != nullptr && unit->name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": ", module->name(), " is already fully sharded"));
  }
  const bool hybrid =
      options.sharding_strategy == ShardingStrategy::kHybridShard ||
      options.sharding_strategy == ShardingStrategy::kHybridShardZero2;
  if (hybrid != (options.replicate_group != nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": ", ShardingStrategyName(options.sharding_strategy),
        hybrid ? " needs a replicate_group (one rank per node)"
               : " takes no replicate_group"));
  }
  std::shared_ptr<FullyShardedDataParallel> fsdp(
      new FullyShardedDataParallel(module, std::move(options), group));
  DK_RETURN_IF_ERROR(fsdp->Build());
  return fsdp;
}

absl::Status FullyShardedDataParallel::Build() {
  // Parameters left as they are: those of ignored modules and frozen ones.
  std::unordered_set<const c10::TensorImpl*> ignored;
  for (const auto& m : options_.ignored_modules) {
    for (const auto& p : m->parameters())
      ignored.insert(p.unsafeGetTensorImpl());
  }
  // Every parameter object once (tied weights appear under several names).
  std::unordered_set<const c10::TensorImpl*> taken;
  for (const auto& p : module_->named_parameters()) {
    const c10::TensorImpl* impl = p.value().unsafeGetTensorImpl();
    if (!ignored.count(impl) && p.value().requires_grad()) continue;
    if (taken.insert(impl).second)
      unsharded_params_.emplace_back(p.key(), p.value());
  }
  auto unclaimed = [&](const std::string& prefix, const torch::nn::Module& m) {
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (const auto& p : m.named_parameters()) {
      if (taken.count(p.value().unsafeGetTensorImpl())) continue;
      params.emplace_back(Join(prefix, p.key()), p.value());
    }
    return params;
  };
  // Submodules, descendants before ancestors: a unit takes the parameters no
  // unit below it took. Units an earlier FullyShard made are adopted, after
  // everything else succeeded, so that a failure changes nothing.
  auto modules = module_->named_modules();
  std::vector<std::pair<std::string, Unit*>> adopt;
  std::vector<std::unique_ptr<Unit>> built;
  for (size_t k = modules.size(); k-- > 1;) {
    const std::string& name = modules[k].key();
    const auto& m = modules[k].value();
    if (Unit* unit = LookupUnit(m.get()); unit != nullptr) {
      if (unit->owner->group_ != group_) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOwner, ": ", name, " was sharded over another group"));
      }
      adopt.emplace_back(name, unit);
      for (const auto& p : unit->params) taken.insert(p.unsafeGetTensorImpl());
      continue;
    }
    if (!options_.auto_wrap_policy) continue;
    auto params = unclaimed(name, *m);
    int64_t numel = 0;
    for (const auto& p : params) numel += p.second.numel();
    if (numel == 0 || !options_.auto_wrap_policy(*m, name, numel)) continue;
    DK_ASSIGN_OR_RETURN(auto unit, BuildUnit(name, m.get(), std::move(params)));
    for (const auto& p : unit->params) taken.insert(p.unsafeGetTensorImpl());
    built.push_back(std::move(unit));
  }
  // The root unit: the rest.
  if (auto rest = unclaimed("", *module_); !rest.empty()) {
    DK_ASSIGN_OR_RETURN(auto unit,
                        BuildUnit("", module_.get(), std::move(rest)));
    built.push_back(std::move(unit));
  }
  if (options_.sync_module_states) {
    torch::NoGradGuard no_grad;
    std::vector<std::pair<std::string, torch::Tensor>> replicated =
        unsharded_params_;
    for (const auto& b : module_->named_buffers()) {
      replicated.emplace_back(b.key(), b.value());
    }
    for (auto& [key, t] : replicated) {
      DK_RETURN_IF_ERROR(BroadcastFromRank0(t, key));
    }
  }
  // Nothing fails from here on. Units run backward-finishing in this order:
  // adopted ones, then the new ones, descendants first, the root last.
  for (auto& [name, unit] : adopt) {
    FullyShardedDataParallel* old = unit->owner;
    auto it = std::find_if(old->units_.begin(), old->units_.end(),
                           [&](const auto& u) { return u.get() == unit; });
    std::unique_ptr<Unit> moved = std::move(*it);
    old->units_.erase(it);
    old->absorbed_ = true;
    for (auto& n : moved->names) n = Join(name, n);
    moved->name = name;
    moved->owner = this;
    units_.push_back(std::move(moved));
  }
  for (auto& unit : built) {
    UsePieceViews(*unit, /*with_grads=*/true);
    units_.push_back(std::move(unit));
  }
  std::vector<std::shared_ptr<FullyShardedDataParallel>> released;
  {
    absl::MutexLock lock(&registry_mu);
    for (auto& unit : units_) Registry()[unit->module] = unit.get();
    for (auto& [name, unit] : adopt) {
      auto it = Unadopted().find(unit->module);
      if (it == Unadopted().end()) continue;
      released.push_back(std::move(it->second));  // destroyed unlocked
      Unadopted().erase(it);
    }
  }
  register_module("module", module_);
  Account();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FullyShardedDataParallel::Unit>>
FullyShardedDataParallel::BuildUnit(
    const std::string& name, const torch::nn::Module* module,
    std::vector<std::pair<std::string, torch::Tensor>> params) {
  auto unit = std::make_unique<Unit>();
  unit->name = name;
  unit->module = module;
  unit->owner = this;
  std::vector<FlatShard::Parameter> flat_params;
  for (auto& [pname, p] : params) {
    DK_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(p.detach(), kOwner, pname));
    flat_params.push_back({ref, pname});
    unit->params.push_back(p);
    unit->names.push_back(pname);
    unit->shapes.push_back(p.sizes().vec());
    unit->dtypes.push_back(p.scalar_type());
  }
  unit->device = params.front().second.device();
  FlatShard::Options o;
  o.strategy = options_.sharding_strategy;
  o.param_dtype = options_.param_dtype;
  o.reduce_dtype = options_.reduce_dtype;
  o.offload_params = options_.offload_params;
  o.sync_module_states = options_.sync_module_states;
  o.replicate_group = options_.replicate_group;
  absl::StatusOr<std::unique_ptr<FlatShard>> shard =
      FlatShard::Create(group_, std::move(flat_params), o);
  if (!shard.ok()) {
    return absl::Status(shard.status().code(),
                        absl::StrCat(kOwner, ": unit '", name,
                                     "': ", shard.status().message()));
  }
  unit->shard = std::move(*shard);
  for (int i = 0; i < unit->shard->num_params(); ++i) {
    FlatShard::LocalPiece piece = unit->shard->Piece(i);
    if (piece.numel > 0) {
      unit->piece_data.push_back(AsTorchTensor(piece.data, {piece.numel}));
      unit->piece_grad.push_back(AsTorchTensor(piece.grad, {piece.numel}));
    } else {
      const TensorRef shard0 = unit->shard->Shard(0);
      auto options = torch::TensorOptions()
                         .dtype(unit->dtypes[i])
                         .device(TorchDeviceOf(shard0.device()));
      unit->piece_data.push_back(torch::empty({0}, options));
      unit->piece_grad.push_back(torch::zeros({0}, options));
    }
  }
  for (int k = 0; k < unit->shard->num_flat(); ++k) {
    unit->storages.push_back(c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), 0,
        at::DataPtr(nullptr, unit->device), nullptr, /*resizable=*/false));
  }
  return unit;
}

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
  absl::Status s = Gather(*unit);
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
  torch::Tensor& grad = unit->params[index].mutable_grad();
  absl::Status s;
  if (!grad.defined()) {
    s = absl::InternalError(
        absl::StrCat(kOwner, ": ", unit->names[index], " has no gradient"));
  } else {
    // The previous unit's reduction ran while this unit's first gradients
    // were computed; finish it before this unit's full gradients are
    // allocated, so the library never holds two units' full gradients.
    if (reducing_ != nullptr && reducing_ != unit) s = CompleteReduction();
    torch::Tensor g = grad.contiguous();
    absl::StatusOr<TensorRef> ref =
        AsTensorRef(g, kOwner, unit->names[index] + ".grad");
    if (s.ok()) {
      s = ref.ok() ? unit->shard->AccumulateGrad(index, *ref) : ref.status();
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
    // Leave every unit sharded, so the model is consistent again.
    for (auto& unit : units_) {
      unit->finished = true;
      if (unit->full_views) FreeUnit(*unit, true).IgnoreError();
    }
  }
  in_iteration_ = false;
  first_iteration_ = false;
  last_forward_order_ = forward_order_;
  hooked_.clear();
  return status;
}

absl::Status FullyShardedDataParallel::Reshard() {
  absl::Status status;
  for (auto& unit : units_) {
    if (unit->full_views) status.Update(FreeUnit(*unit, /*with_grads=*/true));
  }
  if (in_iteration_) {
    in_iteration_ = false;
    first_iteration_ = false;
    last_forward_order_ = forward_order_;
  }
  Account();
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

// ---- State dicts ------------------------------------------------------------

absl::Status FullyShardedDataParallel::BroadcastFromRank0(
    const torch::Tensor& t, const std::string& name) {
  // Rank 0 of the job: first to the other nodes' rank 0 (hybrid), then
  // inside each node.
  DK_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(t, kOwner, name));
  if (options_.replicate_group != nullptr) {
    DK_RETURN_IF_ERROR(options_.replicate_group->Broadcast(ref, 0));
  }
  return group_->Broadcast(ref, 0);
}

bool FullyShardedDataParallel::job_rank0() const {
  return group_->rank() == 0 && (options_.replicate_group == nullptr ||
                                 options_.replicate_group->rank() == 0);
}

absl::Status FullyShardedDataParallel::RequireSharded(
    absl::string_view what) const {
  for (const auto& unit : units_) {
    if (in_iteration_ || unit->full_views) {
      return absl::FailedPreconditionError(absl::StrCat(
          kOwner, ": ", what, " between BeforeForward and Backward"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::OrderedDict<std::string, torch::Tensor>>
FullyShardedDataParallel::FullStateDict(bool rank0_only) {
  DK_RETURN_IF_ERROR(RequireSharded("FullStateDict"));
  const bool mine = !rank0_only || job_rank0();
  std::unordered_map<const c10::TensorImpl*, torch::Tensor> gathered;
  for (auto& unit : units_) {
    std::vector<TensorRef> outs;
    std::vector<torch::Tensor> values;
    for (size_t i = 0; i < unit->params.size(); ++i) {
      if (!mine) {
        outs.emplace_back();
        continue;
      }
      values.push_back(torch::empty(unit->shapes[i], unit->dtypes[i]));
      DK_ASSIGN_OR_RETURN(TensorRef ref,
                          AsTensorRef(values.back(), kOwner, unit->names[i]));
      outs.push_back(ref);
      gathered[unit->params[i].unsafeGetTensorImpl()] = values.back();
    }
    DK_RETURN_IF_ERROR(unit->shard->GatherFullParams(outs, rank0_only));
  }
  torch::OrderedDict<std::string, torch::Tensor> state;
  if (!mine) return state;
  for (const auto& p : module_->named_parameters()) {
    auto it = gathered.find(p.value().unsafeGetTensorImpl());
    state.insert(p.key(), it != gathered.end()
                              ? it->second
                              : p.value().detach().to(torch::kCPU).clone());
  }
  for (const auto& b : module_->named_buffers()) {
    state.insert(b.key(), b.value().detach().to(torch::kCPU).clone());
  }
  return state;
}

// What `state` must hold: every parameter and buffer, in its shape.
absl::Status FullyShardedDataParallel::CheckStateDict(
    const torch::OrderedDict<std::string, torch::Tensor>& state) const {
  std::unordered_map<const c10::TensorImpl*, std::vector<int64_t>> shapes;
  for (const auto& unit : units_) {
    for (size_t i = 0; i < unit->params.size(); ++i) {
      shapes[unit->params[i].unsafeGetTensorImpl()] = unit->shapes[i];
    }
  }
  std::unordered_set<std::string> expected;
  auto check = [&](const std::string& key,
                   const std::vector<int64_t>& shape) -> absl::Status {
    expected.insert(key);
    const torch::Tensor* value = state.find(key);
    if (value == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOwner, ": the state dict has no '", key, "'"));
    }
    if (value->sizes().vec() != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOwner, ": '", key, "' is [", absl::StrJoin(value->sizes(), ", "),
          "] in the state dict, [", absl::StrJoin(shape, ", "),
          "] in the model"));
    }
    return absl::OkStatus();
  };
  for (const auto& p : module_->named_parameters()) {
    auto it = shapes.find(p.value().unsafeGetTensorImpl());
    DK_RETURN_IF_ERROR(check(
        p.key(), it != shapes.end() ? it->second : p.value().sizes().vec()));
  }
  for (const auto& b : module_->named_buffers()) {
    DK_RETURN_IF_ERROR(check(b.key(), b.value().sizes().vec()));
  }
  for (const auto& item : state) {
    if (!expected.count(item.key())) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOwner, ": unexpected key '", item.key(),
                       "' in the state dict (a checkpoint of another model?)"));
    }
  }
  return absl::OkStatus();
}

absl::Status FullyShardedDataParallel::AgreeValid(absl::Status valid,
                                                  bool rank0_only) {
  // Every rank learns whether any rank's (or rank 0's) input is bad, so none
  // loads half and none waits in a broadcast that will not come.
  int32_t bad = valid.ok() ? 0 : 1;
  TensorRef flag(&bad, 1, DataType::kInt32);
  for (ProcessGroup* g : {options_.replicate_group.get(), group_.get()}) {
    if (g == nullptr) continue;
    DK_RETURN_IF_ERROR(rank0_only ? g->Broadcast(flag, 0)
                                  : g->AllReduce(flag, ReduceOp::kMax));
  }
  if (bad != 0 && valid.ok()) {
    valid = absl::InvalidArgumentError(
        absl::StrCat(kOwner, ": ", rank0_only ? "rank 0's" : "another rank's",
                     " state dict does not match the model"));
  }
  return valid;
}

absl::Status FullyShardedDataParallel::LoadFullStateDict(
    const torch::OrderedDict<std::string, torch::Tensor>& state,
    bool rank0_only) {
  DK_RETURN_IF_ERROR(RequireSharded("LoadFullStateDict"));
  const bool mine = !rank0_only || job_rank0();
  DK_RETURN_IF_ERROR(
      AgreeValid(mine ? CheckStateDict(state) : absl::OkStatus(), rank0_only));
  torch::NoGradGuard no_grad;
  std::unordered_map<const c10::TensorImpl*, std::string> name_of;
  for (const auto& p : module_->named_parameters()) {
    name_of.emplace(p.value().unsafeGetTensorImpl(), p.key());
  }
  for (auto& unit : units_) {
    std::vector<torch::Tensor> keep;
    std::vector<TensorRef> values;
    for (size_t i = 0; i < unit->params.size(); ++i) {
      if (!mine) {
        values.emplace_back();
        continue;
      }
      const std::string& key = name_of[unit->params[i].unsafeGetTensorImpl()];
      keep.push_back(state[key].detach().to(unit->dtypes[i]).contiguous());
      DK_ASSIGN_OR_RETURN(TensorRef ref, AsTensorRef(keep.back(), kOwner, key));
      values.push_back(ref);
    }
    DK_RETURN_IF_ERROR(unit->shard->LoadFullParams(values, rank0_only));
  }
  // Replicated tensors: copied, or broadcast from rank 0.
  std::vector<std::pair<std::string, torch::Tensor>> replicated =
      unsharded_params_;
  for (const auto& b : module_->named_buffers()) {
    replicated.emplace_back(b.key(), b.value());
  }
  for (auto& [key, t] : replicated) {
    if (mine) t.copy_(state[key]);
    if (!rank0_only) continue;
    DK_RETURN_IF_ERROR(BroadcastFromRank0(t, key));
  }
  return absl::OkStatus();
}

namespace {

// The unit's metadata as one int64 tensor: world size, flat count, then per
// flat its dtype and numel, then the parameter count and numels.
torch::Tensor EncodeMetadata(const FlatShard::ShardMetadata& m) {
  std::vector<int64_t> v = {m.world_size,
                            static_cast<int64_t>(m.flat_dtypes.size())};
  for (size_t k = 0; k < m.flat_dtypes.size(); ++k) {
    v.push_back(static_cast<int64_t>(m.flat_dtypes[k]));
    v.push_back(m.flat_numel[k]);
  }
  v.push_back(static_cast<int64_t>(m.param_numel.size()));
  v.insert(v.end(), m.param_numel.begin(), m.param_numel.end());
  return torch::tensor(v, torch::kLong);
}

absl::StatusOr<FlatShard::ShardMetadata> DecodeMetadata(
    const torch::Tensor& t, const std::string& key) {
  const torch::Tensor c = t.to(torch::kLong).contiguous();
  const int64_t* v = c.data_ptr<int64_t>();
  const int64_t n = c.numel();
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(kOwner, ": the checkpoint's ", key, " is malformed"));
  };
  if (n < 2) return bad();
  FlatShard::ShardMetadata m;
  m.world_size = static_cast<int>(v[0]);
  const int64_t flats = v[1];
  if (flats < 0 || 2 + 2 * flats + 1 > n) return bad();
  for (int64_t k = 0; k < flats; ++k) {
    m.flat_dtypes.push_back(static_cast<DataType>(v[2 + 2 * k]));
    m.flat_numel.push_back(v[3 + 2 * k]);
  }
  const int64_t params = v[2 + 2 * flats];
  if (params < 0 || 3 + 2 * flats + params != n) return bad();
  m.param_numel.assign(v + 3 + 2 * flats, v + n);
  return m;
}

std::string ShardFile(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/shard_rank", rank, ".pt");
}

absl::StatusOr<c10::Dict<std::string, at::Tensor>> ReadShardFile(
    const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(
        absl::StrCat(kOwner, ": cannot read the checkpoint file ", path));
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)),
                          std::istreambuf_iterator<char>());
  try {
    return c10::impl::toTypedDict<std::string, at::Tensor>(
        torch::pickle_load(bytes).toGenericDict());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": ", path, " is not a sharded checkpoint: ", e.what()));
  }
}

}  // namespace

absl::Status FullyShardedDataParallel::SaveShardedCheckpoint(
    const std::string& dir) {
  DK_RETURN_IF_ERROR(RequireSharded("SaveShardedCheckpoint"));
  c10::Dict<std::string, at::Tensor> out;
  for (size_t u = 0; u < units_.size(); ++u) {
    const FlatShard& shard = *units_[u]->shard;
    out.insert(absl::StrCat("unit", u, ".meta"),
               EncodeMetadata(shard.Metadata()));
    for (int k = 0; k < shard.num_flat(); ++k) {
      const TensorRef s = shard.Shard(k);
      out.insert(absl::StrCat("unit", u, ".flat", k),
                 AsTorchTensor(s, {s.numel()}).to(torch::kCPU).clone());
    }
  }
  for (const auto& [key, p] : unsharded_params_) {
    out.insert("param." + key, p.detach().to(torch::kCPU).clone());
  }
  for (const auto& b : module_->named_buffers()) {
    out.insert("buffer." + b.key(), b.value().detach().to(torch::kCPU).clone());
  }
  // Replicas of a shard (hybrid) write the same bytes; the first node's do.
  absl::Status written;
  if (options_.replicate_group == nullptr ||
      options_.replicate_group->rank() == 0) {
    const std::string path = ShardFile(dir, group_->rank());
    std::vector<char> bytes = torch::pickle_save(c10::IValue(out));
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      written =
          absl::UnavailableError(absl::StrCat(kOwner, ": cannot write ", path));
    }
  }
  // Everyone's file exists (or everyone hears of the failure) on return.
  return AgreeValid(written, /*rank0_only=*/false);
}

absl::Status FullyShardedDataParallel::LoadShardedCheckpoint(
    const std::string& dir) {
  DK_RETURN_IF_ERROR(RequireSharded("LoadShardedCheckpoint"));
  absl::flat_hash_map<int, c10::Dict<std::string, at::Tensor>> files;
  auto file =
      [&](int rank) -> absl::StatusOr<c10::Dict<std::string, at::Tensor>*> {
    auto it = files.find(rank);
    if (it == files.end()) {
      DK_ASSIGN_OR_RETURN(auto dict, ReadShardFile(ShardFile(dir, rank)));
      it = files.emplace(rank, std::move(dict)).first;
    }
    return &it->second;
  };
  // Check everything before loading anything.
  std::vector<FlatShard::ShardMetadata> saved;
  absl::Status valid = [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(auto* first, file(0));
    for (size_t u = 0;; ++u) {
      const std::string key = absl::StrCat("unit", u, ".meta");
      if (!first->contains(key)) {
        if (u != units_.size()) {
          return absl::InvalidArgumentError(absl::StrCat(
              kOwner, ": the checkpoint has ", u, " units, the model ",
              units_.size(), " (a checkpoint of another model?)"));
        }
        break;
      }
      if (u >= units_.size()) continue;
      DK_ASSIGN_OR_RETURN(auto m, DecodeMetadata(first->at(key), key));
      FlatShard::ShardMetadata mine = units_[u]->shard->Metadata();
      if (m.flat_dtypes != mine.flat_dtypes ||
          m.flat_numel != mine.flat_numel ||
          m.param_numel != mine.param_numel) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOwner, ": unit ", u, " ('", units_[u]->name,
            "') has other parameters in the checkpoint (a checkpoint of "
            "another model?)"));
      }
      saved.push_back(std::move(m));
    }
    for (const auto& [key, p] : unsharded_params_) {
      if (!first->contains("param." + key)) {
        return absl::InvalidArgumentError(
            absl::StrCat(kOwner, ": the checkpoint has no '", key, "'"));
      }
    }
    for (const auto& b : module_->named_buffers()) {
      if (!first->contains("buffer." + b.key())) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOwner, ": the checkpoint has no buffer '", b.key(), "'"));
      }
    }
    return absl::OkStatus();
  }();
  DK_RETURN_IF_ERROR(AgreeValid(valid, /*rank0_only=*/false));
  absl::Status loaded;
  for (size_t u = 0; u < units_.size() && loaded.ok(); ++u) {
    torch::Tensor held;
    loaded = units_[u]->shard->LoadShardedParams(
        saved[u], [&](int flat, int rank) -> absl::StatusOr<TensorRef> {
          DK_ASSIGN_OR_RETURN(auto* dict, file(rank));
          const std::string key = absl::StrCat("unit", u, ".flat", flat);
          if (!dict->contains(key)) {
            return absl::InvalidArgumentError(absl::StrCat(
                kOwner, ": ", ShardFile(dir, rank), " has no ", key));
          }
          held = dict->at(key).contiguous();
          return AsTensorRef(held, kOwner, key);
        });
  }
  if (loaded.ok()) {
    torch::NoGradGuard no_grad;
    DK_ASSIGN_OR_RETURN(auto* first, file(0));
    for (auto& [key, p] : unsharded_params_) p.copy_(first->at("param." + key));
    for (const auto& b : module_->named_buffers()) {
      b.value().copy_(first->at("buffer." + b.key()));
    }
  }
  return AgreeValid(loaded, /*rank0_only=*/false);
}

// ---- Introspection ----------------------------------------------------------

const std::string& FullyShardedDataParallel::unit_name(int k) const {
  return units_[k]->name;
}

FlatShard& FullyShardedDataParallel::unit_shard(int k) {
  return *units_[k]->shard;
}

const std::vector<torch::Tensor>& FullyShardedDataParallel::unit_params(
    int k) const {
  return units_[k]->params;
}

const std::vector<std::vector<int64_t>>&
FullyShardedDataParallel::unit_param_shapes(int k) const {
  return units_[k]->shapes;
}

size_t FullyShardedDataParallel::held_bytes() const {
  size_t total = 0;
  for (const auto& unit : units_) total += unit->shard->held_bytes();
  return total;
}

void FullyShardedDataParallel::Account() {
  peak_bytes_ = std::max(peak_bytes_, held_bytes());
}

std::vector<FullyShardedDataParallel::TimelineEvent>
FullyShardedDataParallel::TakeTimeline() {
  std::vector<TimelineEvent> events;
  for (size_t u = 0; u < units_.size(); ++u) {
    const absl::Time base = units_[u]->shard->created_at();
    for (const auto& e : units_[u]->shard->TakeEvents()) {
      events.push_back({static_cast<int>(u), e.kind, base + e.at});
    }
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const auto& a, const auto& b) { return a.at < b.at; });
  return events;
}

// ---- Free functions ---------------------------------------------------------

torch::Tensor UnitForward(const torch::nn::Module& module,
                          const std::function<torch::Tensor()>& forward) {
  FullyShardedDataParallel::Unit* unit = LookupUnit(&module);
  if (unit == nullptr) return forward();
  return unit->owner->RunUnitForward(unit, forward);
}

absl::StatusOr<std::shared_ptr<FullyShardedDataParallel>> FullyShard(
    std::shared_ptr<torch::nn::Module> module, FsdpOptions options,
    std::shared_ptr<ProcessGroup> group) {
  options.auto_wrap_policy = nullptr;  // the units are the calls
  const torch::nn::Module* key = module.get();
  DK_ASSIGN_OR_RETURN(
      auto fsdp, FullyShardedDataParallel::Create(
                     std::move(module), std::move(options), std::move(group)));
  absl::MutexLock lock(&registry_mu);
  Unadopted()[key] = fsdp;
  return fsdp;
}

}  // namespace distkit
