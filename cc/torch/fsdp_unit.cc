#include "cc/torch/fsdp_unit.h"

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

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
