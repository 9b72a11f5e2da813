#include "cc/torch/fully_sharded_data_parallel.h"

#include <algorithm>

#include "cc/torch/fsdp_unit.h"

// The class is split by concept: wrapping a module into units
// (fsdp_wrapping.cc), the training iteration (fsdp_runtime.cc), state dicts
// and checkpoints (fsdp_state_dict.cc). Here: its life and introspection.

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
