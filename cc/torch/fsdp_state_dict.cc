// State dicts and checkpoints: the full state dict (gathered, or loaded
// and re-sharded), the sharded checkpoint (each rank's shards in a file of
// its own, fsdp_checkpoint_file.h), and the cross-rank agreement that every
// rank loads or none does.

#include <torch/serialize.h>

#include <fstream>
#include <iterator>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cc/core/status.h"
#include "cc/group/agreement.h"
#include "cc/torch/fsdp_checkpoint_file.h"
#include "cc/torch/fsdp_unit.h"
#include "cc/torch/fully_sharded_data_parallel.h"
#include "cc/torch/torch_tensor_ref.h"

namespace distkit {

using fsdp_internal::BufferKey;
using fsdp_internal::CountUnits;
using fsdp_internal::DecodeMetadata;
using fsdp_internal::EncodeMetadata;
using fsdp_internal::FlatKey;
using fsdp_internal::kOwner;
using fsdp_internal::MetaKey;
using fsdp_internal::ParamKey;
using fsdp_internal::ReadShardFile;
using fsdp_internal::ShardFile;
using fsdp_internal::ShardFileContents;
using fsdp_internal::WriteShardFile;

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
    state.insert(b.key(), SavedBuffer(b.key(), b.value()));
  }
  return state;
}

torch::Tensor FullyShardedDataParallel::SavedBuffer(
    const std::string& name, const torch::Tensor& value) const {
  auto own = buffer_dtypes_.find(name);
  torch::Tensor cpu = value.detach().to(torch::kCPU);
  return own == buffer_dtypes_.end() ? cpu.clone() : cpu.to(own->second);
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
                                                  bool rank0_only,
                                                  absl::string_view what) {
  // Every rank learns whether any rank's (or rank 0's) input is bad, so none
  // loads half and none waits in a broadcast that will not come. Over the
  // replicate group first (hybrid), then the node's: the verdict names the
  // job rank it came from.
  Verdict verdict = Verdict::Mine(*group_, valid);
  for (ProcessGroup* g : {options_.replicate_group.get(), group_.get()}) {
    if (g == nullptr) continue;
    DK_ASSIGN_OR_RETURN(verdict, rank0_only ? AgreeOnRootVerdict(*g, verdict)
                                            : AgreeOnVerdict(*g, verdict));
  }
  // A rank with a problem of its own reports it as it is.
  if (verdict.ok() || !valid.ok()) return valid;
  return absl::Status(
      verdict.status.code(),
      absl::StrCat(kOwner, ": rank ", verdict.job_rank, "'s ", what, ": ",
                   absl::StripPrefix(verdict.status.message(),
                                     absl::StrCat(kOwner, ": "))));
}

absl::Status FullyShardedDataParallel::LoadFullStateDict(
    const torch::OrderedDict<std::string, torch::Tensor>& state,
    bool rank0_only) {
  DK_RETURN_IF_ERROR(RequireSharded("LoadFullStateDict"));
  const bool mine = !rank0_only || job_rank0();
  DK_RETURN_IF_ERROR(AgreeValid(mine ? CheckStateDict(state) : absl::OkStatus(),
                                rank0_only,
                                "state dict does not match the model"));
  torch::NoGradGuard no_grad;
  std::unordered_map<const c10::TensorImpl*, std::string> name_of;
  for (const auto& p : module_->named_parameters()) {
    name_of.emplace(p.value().unsafeGetTensorImpl(), p.key());
  }
  for (auto& unit : units_) {
    std::vector<torch::Tensor> keep;
    std::vector<TensorRef> values;
    // A value this rank cannot lend goes to the load as its error, not out
    // of here: with rank0_only the others wait for rank 0's broadcast.
    absl::Status values_error;
    for (size_t i = 0; i < unit->params.size() && values_error.ok(); ++i) {
      if (!mine) {
        values.emplace_back();
        continue;
      }
      const std::string& key = name_of[unit->params[i].unsafeGetTensorImpl()];
      keep.push_back(state[key].detach().to(unit->dtypes[i]).contiguous());
      absl::StatusOr<TensorRef> ref = AsTensorRef(keep.back(), kOwner, key);
      if (ref.ok()) {
        values.push_back(*ref);
      } else {
        values_error = ref.status();
        values.clear();
      }
    }
    DK_RETURN_IF_ERROR(
        unit->shard->LoadFullParams(values, rank0_only, values_error));
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

// ---- Sharded checkpoints ----------------------------------------------------

absl::Status FullyShardedDataParallel::SaveShardedCheckpoint(
    const std::string& dir) {
  DK_RETURN_IF_ERROR(RequireSharded("SaveShardedCheckpoint"));
  ShardFileContents out;
  for (const auto& unit : units_) {
    const FlatShard& shard = *unit->shard;
    out.insert(MetaKey(unit->name), EncodeMetadata(shard.Metadata()));
    for (int k = 0; k < shard.num_flat(); ++k) {
      const TensorRef s = shard.Shard(k);
      out.insert(FlatKey(unit->name, k),
                 AsTorchTensor(s, {s.numel()}).to(torch::kCPU).clone());
    }
  }
  for (const auto& [key, p] : unsharded_params_) {
    out.insert(ParamKey(key), p.detach().to(torch::kCPU).clone());
  }
  for (const auto& b : module_->named_buffers()) {
    out.insert(BufferKey(b.key()), SavedBuffer(b.key(), b.value()));
  }
  // Replicas of a shard (hybrid) write the same bytes; the first node's do.
  absl::Status written;
  if (options_.replicate_group == nullptr ||
      options_.replicate_group->rank() == 0) {
    written = WriteShardFile(ShardFile(dir, group_->rank()), out);
  }
  // Everyone's file exists (or everyone hears of the failure) on return.
  return AgreeValid(written, /*rank0_only=*/false,
                    "checkpoint file could not be written");
}

absl::Status FullyShardedDataParallel::LoadShardedCheckpoint(
    const std::string& dir) {
  DK_RETURN_IF_ERROR(RequireSharded("LoadShardedCheckpoint"));
  absl::flat_hash_map<int, ShardFileContents> files;
  auto file = [&](int rank) -> absl::StatusOr<ShardFileContents*> {
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
    const size_t saved_units = CountUnits(*first);
    for (size_t u = 0; u < units_.size(); ++u) {
      const std::string key = MetaKey(units_[u]->name);
      if (!first->contains(key) || saved_units != units_.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOwner, ": the checkpoint has ", saved_units, " units",
            first->contains(key)
                ? ""
                : absl::StrCat(", none at '", units_[u]->name, "'"),
            "; the model ", units_.size(),
            " (a checkpoint of another model?)"));
      }
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
      if (!first->contains(ParamKey(key))) {
        return absl::InvalidArgumentError(
            absl::StrCat(kOwner, ": the checkpoint has no '", key, "'"));
      }
    }
    for (const auto& b : module_->named_buffers()) {
      if (!first->contains(BufferKey(b.key()))) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOwner, ": the checkpoint has no buffer '", b.key(), "'"));
      }
    }
    return absl::OkStatus();
  }();
  DK_RETURN_IF_ERROR(AgreeValid(valid, /*rank0_only=*/false,
                                "check of the checkpoint failed"));
  // Another rank's files are read only now (each rank reads the saved
  // shards that overlap its own), so a rank may fail after others loaded:
  // every rank keeps what it had, to put back unless all of them loaded.
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> old_shards(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    for (int k = 0; k < units_[u]->shard->num_flat(); ++k) {
      const TensorRef shard = units_[u]->shard->Shard(k);
      old_shards[u].push_back(AsTorchTensor(shard, {shard.numel()}).clone());
    }
  }
  std::vector<torch::Tensor> old_params, old_buffers;
  for (auto& [key, p] : unsharded_params_) old_params.push_back(p.clone());
  for (const auto& b : module_->named_buffers()) {
    old_buffers.push_back(b.value().clone());
  }
  absl::Status loaded;
  for (size_t u = 0; u < units_.size() && loaded.ok(); ++u) {
    torch::Tensor held;
    loaded = units_[u]->shard->LoadShardedParams(
        saved[u], [&](int flat, int rank) -> absl::StatusOr<TensorRef> {
          DK_ASSIGN_OR_RETURN(auto* dict, file(rank));
          const std::string key = FlatKey(units_[u]->name, flat);
          if (!dict->contains(key)) {
            return absl::InvalidArgumentError(absl::StrCat(
                kOwner, ": ", ShardFile(dir, rank), " has no ", key));
          }
          held = dict->at(key).contiguous();
          return AsTensorRef(held, kOwner, key);
        });
  }
  if (loaded.ok()) {
    auto first = file(0);
    loaded = first.status();
    if (loaded.ok()) {
      for (auto& [key, p] : unsharded_params_) {
        p.copy_((*first)->at(ParamKey(key)));
      }
      for (const auto& b : module_->named_buffers()) {
        b.value().copy_((*first)->at(BufferKey(b.key())));
      }
    }
  }
  absl::Status agreed = AgreeValid(loaded, /*rank0_only=*/false,
                                   "loading of the checkpoint failed");
  if (!agreed.ok()) {
    for (size_t u = 0; u < units_.size(); ++u) {
      for (int k = 0; k < units_[u]->shard->num_flat(); ++k) {
        const TensorRef shard = units_[u]->shard->Shard(k);
        AsTorchTensor(shard, {shard.numel()}).copy_(old_shards[u][k]);
      }
    }
    size_t i = 0;
    for (auto& [key, p] : unsharded_params_) p.copy_(old_params[i++]);
    i = 0;
    for (const auto& b : module_->named_buffers()) {
      b.value().copy_(old_buffers[i++]);
    }
  }
  return agreed;
}

}  // namespace distkit

namespace distkit {
namespace fsdp_internal {

at::Tensor EncodeMetadata(const FlatShard::ShardMetadata& m) {
  std::vector<int64_t> v = {m.world_size,
                            static_cast<int64_t>(m.flat_dtypes.size())};
  for (size_t k = 0; k < m.flat_dtypes.size(); ++k) {
    v.push_back(static_cast<int64_t>(m.flat_dtypes[k]));
    v.push_back(m.flat_numel[k]);
  }
  v.push_back(static_cast<int64_t>(m.param_numel.size()));
  v.insert(v.end(), m.param_numel.begin(), m.param_numel.end());
  // Only where a parameter is frozen, so other files stay as before.
  v.insert(v.end(), m.param_frozen.begin(), m.param_frozen.end());
  return torch::tensor(v, torch::kLong);
}

absl::StatusOr<FlatShard::ShardMetadata> DecodeMetadata(
    const at::Tensor& t, const std::string& key) {
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
  // Bounded by n before any arithmetic: a corrupt count must not overflow.
  if (n < 3 || flats < 0 || flats > (n - 3) / 2) return bad();
  for (int64_t k = 0; k < flats; ++k) {
    m.flat_dtypes.push_back(static_cast<DataType>(v[2 + 2 * k]));
    m.flat_numel.push_back(v[3 + 2 * k]);
  }
  const int64_t params = v[2 + 2 * flats];
  const int64_t base = 3 + 2 * flats;
  // Then, where some parameter is frozen, a flag per parameter.
  if (params < 0 || params > n - base ||
      (base + params != n && base + 2 * params != n)) {
    return bad();
  }
  m.param_numel.assign(v + base, v + base + params);
  if (base + 2 * params == n && params > 0) {
    m.param_frozen.assign(v + base + params, v + n);
  }
  return m;
}

std::string ShardFile(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/shard_rank", rank, ".pt");
}

std::string MetaKey(const std::string& unit) {
  return absl::StrCat("unit[", unit, "].meta");
}

std::string FlatKey(const std::string& unit, int flat) {
  return absl::StrCat("unit[", unit, "].flat", flat);
}

std::string ParamKey(const std::string& name) { return "param." + name; }

std::string BufferKey(const std::string& name) { return "buffer." + name; }

size_t CountUnits(const ShardFileContents& contents) {
  size_t n = 0;
  for (const auto& item : contents) {
    const std::string key = item.key();
    n += absl::StartsWith(key, "unit[") && absl::EndsWith(key, "].meta");
  }
  return n;
}

absl::StatusOr<ShardFileContents> ReadShardFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(
        absl::StrCat(kOwner, ": cannot read the checkpoint file ", path));
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)),
                          std::istreambuf_iterator<char>());
  try {
    // Python's torch.save of a dict unpickles untyped (Dict<Any, Any>).
    ShardFileContents out;
    for (const auto& item : torch::pickle_load(bytes).toGenericDict()) {
      out.insert(item.key().toStringRef(), item.value().toTensor());
    }
    return out;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": ", path, " is not a sharded checkpoint: ", e.what()));
  }
}

absl::Status WriteShardFile(const std::string& path,
                            const ShardFileContents& contents) {
  std::vector<char> bytes = torch::pickle_save(c10::IValue(contents));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    return absl::UnavailableError(
        absl::StrCat(kOwner, ": cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace fsdp_internal
}  // namespace distkit
