#include "cc/torch/fully_sharded_data_parallel.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/torch/fsdp_unit.h"
#include "cc/torch/torch_tensor_ref.h"

// The class is split by concept, one translation unit each (every one that
// includes LibTorch's module header costs 15-20 s to compile): here its life,
// introspection, the unit registry (fsdp_unit.h) and wrapping a module into
// units; the training iteration in fsdp_runtime.cc; state dicts and
// checkpoint files (fsdp_checkpoint_file.h) in fsdp_state_dict.cc.

namespace distkit {

using fsdp_internal::kOwner;

// ---- Lifetime ---------------------------------------------------------------

FullyShardedDataParallel::FullyShardedDataParallel(
    std::shared_ptr<torch::nn::Module> module, FsdpOptions options,
    std::shared_ptr<ProcessGroup> group)
    : torch::nn::Module(kOwner),
      module_(std::move(module)),
      options_(std::move(options)),
      group_(std::move(group)) {}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  fsdp_internal::UnregisterUnits(units_);
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

}  // namespace distkit

namespace distkit {
namespace fsdp_internal {
namespace {

using Unit = FullyShardedDataParallel::Unit;

absl::Mutex registry_mu;

absl::flat_hash_map<const torch::nn::Module*, Unit*>& Registry()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* registry =
      new absl::flat_hash_map<const torch::nn::Module*, Unit*>();
  return *registry;
}

absl::flat_hash_map<const torch::nn::Module*,
                    std::shared_ptr<FullyShardedDataParallel>>&
Unadopted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu) {
  static auto* unadopted =
      new absl::flat_hash_map<const torch::nn::Module*,
                              std::shared_ptr<FullyShardedDataParallel>>();
  return *unadopted;
}

}  // namespace

Unit* LookupUnit(const torch::nn::Module* module) {
  absl::MutexLock lock(&registry_mu);
  auto it = Registry().find(module);
  return it == Registry().end() ? nullptr : it->second;
}

void RegisterUnits(const std::vector<std::unique_ptr<Unit>>& units,
                   const std::vector<const torch::nn::Module*>& adopted) {
  // Destroyed after the lock is released: their destructors unregister.
  std::vector<std::shared_ptr<FullyShardedDataParallel>> released;
  absl::MutexLock lock(&registry_mu);
  for (const auto& unit : units) Registry()[unit->module] = unit.get();
  for (const torch::nn::Module* module : adopted) {
    auto it = Unadopted().find(module);
    if (it == Unadopted().end()) continue;
    released.push_back(std::move(it->second));
    Unadopted().erase(it);
  }
}

void UnregisterUnits(const std::vector<std::unique_ptr<Unit>>& units) {
  absl::MutexLock lock(&registry_mu);
  for (const auto& unit : units) {
    auto it = Registry().find(unit->module);
    if (it != Registry().end() && it->second == unit.get()) {
      Registry().erase(it);
    }
  }
}

void KeepUntilAdopted(const torch::nn::Module* module,
                      std::shared_ptr<FullyShardedDataParallel> fsdp) {
  std::shared_ptr<FullyShardedDataParallel> replaced;  // destroyed unlocked
  absl::MutexLock lock(&registry_mu);
  replaced = std::exchange(Unadopted()[module], std::move(fsdp));
}

}  // namespace fsdp_internal
}  // namespace distkit

// Wrapping: the auto-wrap policies, and turning a module into units (which
// submodules become units, which parameters each takes, adopting the units
// earlier FullyShard calls made, building each unit's FlatShard).

namespace distkit {

using fsdp_internal::kOwner;
using fsdp_internal::LookupUnit;

namespace {

std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : absl::StrCat(prefix, ".", name);
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

// ---- Building units ---------------------------------------------------------

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
  // named_parameters() lists a tensor tied under several names inside `m`
  // under each: a unit takes it once, under its first name (FullStateDict
  // still gives it under every name).
  auto unclaimed = [&](const std::string& prefix, const torch::nn::Module& m) {
    std::vector<std::pair<std::string, torch::Tensor>> params;
    std::unordered_set<const c10::TensorImpl*> seen;
    for (const auto& p : m.named_parameters()) {
      const c10::TensorImpl* impl = p.value().unsafeGetTensorImpl();
      if (taken.count(impl) || !seen.insert(impl).second) continue;
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
  if (options_.buffer_dtype.has_value()) {
    // After sync_module_states: rank 0's values travel in their own dtype.
    torch::NoGradGuard no_grad;
    const torch::ScalarType to = ScalarTypeOf(*options_.buffer_dtype);
    for (const auto& b : module_->named_buffers()) {
      torch::Tensor buffer = b.value();
      if (!buffer.is_floating_point() || buffer.scalar_type() == to) continue;
      buffer_dtypes_[b.key()] = buffer.scalar_type();
      buffer.set_data(buffer.to(to));
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
    if (moved->name.empty()) {
      // The earlier wrapper's root: its buffers' own dtypes (buffer_dtype
      // cast them already), under this module's names.
      for (const auto& [key, dtype] : old->buffer_dtypes_) {
        buffer_dtypes_[Join(name, key)] = dtype;
      }
    }
    for (auto& n : moved->names) n = Join(name, n);
    moved->name = name;
    moved->owner = this;
    units_.push_back(std::move(moved));
  }
  for (auto& unit : built) {
    UsePieceViews(*unit, /*with_grads=*/true);
    units_.push_back(std::move(unit));
  }
  std::vector<const torch::nn::Module*> adopted;
  for (auto& [name, unit] : adopt) adopted.push_back(unit->module);
  fsdp_internal::RegisterUnits(units_, adopted);
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

absl::StatusOr<std::shared_ptr<FullyShardedDataParallel>> FullyShard(
    std::shared_ptr<torch::nn::Module> module, FsdpOptions options,
    std::shared_ptr<ProcessGroup> group) {
  options.auto_wrap_policy = nullptr;  // the units are the calls
  const torch::nn::Module* key = module.get();
  DK_ASSIGN_OR_RETURN(
      auto fsdp, FullyShardedDataParallel::Create(
                     std::move(module), std::move(options), std::move(group)));
  fsdp_internal::KeepUntilAdopted(key, fsdp);
  return fsdp;
}

}  // namespace distkit
