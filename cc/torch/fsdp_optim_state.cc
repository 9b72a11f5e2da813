#include "cc/torch/fsdp_optim_state.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/core/device_staging.h"
#include "cc/core/status.h"
#include "cc/torch/torch_tensor_ref.h"

namespace distkit {
namespace {

constexpr char kOwner[] = "FullOptimStateDict";
constexpr char kSupported[] =
    "torch::optim Adam, AdamW, SGD, RMSprop and Adagrad are supported";

using torch::optim::OptimizerParamState;
using StateDict = torch::OrderedDict<std::string, torch::Tensor>;

// One parameter's state, by field: pointers into the optimizer's object.
struct Fields {
  std::vector<std::pair<const char*, torch::Tensor*>> tensors;
  int64_t* step = nullptr;
};

absl::StatusOr<Fields> FieldsOf(OptimizerParamState& s) {
  namespace o = torch::optim;
  if (auto* a = dynamic_cast<o::AdamParamState*>(&s)) {
    return Fields{{{"exp_avg", &a->exp_avg()},
                   {"exp_avg_sq", &a->exp_avg_sq()},
                   {"max_exp_avg_sq", &a->max_exp_avg_sq()}},
                  &a->step()};
  }
  if (auto* a = dynamic_cast<o::AdamWParamState*>(&s)) {
    return Fields{{{"exp_avg", &a->exp_avg()},
                   {"exp_avg_sq", &a->exp_avg_sq()},
                   {"max_exp_avg_sq", &a->max_exp_avg_sq()}},
                  &a->step()};
  }
  if (auto* a = dynamic_cast<o::SGDParamState*>(&s)) {
    return Fields{{{"momentum_buffer", &a->momentum_buffer()}}, nullptr};
  }
  if (auto* a = dynamic_cast<o::RMSpropParamState*>(&s)) {
    return Fields{{{"square_avg", &a->square_avg()},
                   {"momentum_buffer", &a->momentum_buffer()},
                   {"grad_avg", &a->grad_avg()}},
                  &a->step()};
  }
  if (auto* a = dynamic_cast<o::AdagradParamState*>(&s)) {
    return Fields{{{"sum", &a->sum()}}, &a->step()};
  }
  return absl::InvalidArgumentError(
      absl::StrCat(kOwner, ": unsupported optimizer state; ", kSupported));
}

// A fresh state of the kind `optimizer` keeps.
absl::StatusOr<std::unique_ptr<OptimizerParamState>> NewState(
    torch::optim::Optimizer& optimizer) {
  namespace o = torch::optim;
  if (dynamic_cast<o::Adam*>(&optimizer)) {
    return std::make_unique<o::AdamParamState>();
  }
  if (dynamic_cast<o::AdamW*>(&optimizer)) {
    return std::make_unique<o::AdamWParamState>();
  }
  if (dynamic_cast<o::SGD*>(&optimizer)) {
    return std::make_unique<o::SGDParamState>();
  }
  if (dynamic_cast<o::RMSprop*>(&optimizer)) {
    return std::make_unique<o::RMSpropParamState>();
  }
  if (dynamic_cast<o::Adagrad*>(&optimizer)) {
    return std::make_unique<o::AdagradParamState>();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(kOwner, ": unsupported optimizer; ", kSupported));
}

std::string StateKey(const torch::Tensor& p) {
  return c10::guts::to_string(p.unsafeGetTensorImpl());
}

OptimizerParamState* StateOf(torch::optim::Optimizer& optimizer,
                             const torch::Tensor& p) {
  auto it = optimizer.state().find(StateKey(p));
  return it == optimizer.state().end() ? nullptr : it->second.get();
}

// The wrapped module's name of each parameter.
absl::flat_hash_map<const c10::TensorImpl*, std::string> NamesOf(
    FullyShardedDataParallel& fsdp) {
  absl::flat_hash_map<const c10::TensorImpl*, std::string> names;
  for (const auto& p : fsdp.wrapped()->named_parameters()) {
    names.emplace(p.value().unsafeGetTensorImpl(), p.key());
  }
  return names;
}

std::string Key(const std::string& param, const char* field) {
  return absl::StrCat("state.", param, ".", field);
}

// The parameters no unit holds (ignored modules, frozen parameters): the
// same on every rank, so their state is taken and loaded as it is.
std::vector<std::pair<std::string, torch::Tensor>> Unsharded(
    FullyShardedDataParallel& fsdp) {
  absl::flat_hash_set<const c10::TensorImpl*> sharded;
  for (int k = 0; k < fsdp.num_units(); ++k) {
    for (const auto& p : fsdp.unit_params(k)) {
      sharded.insert(p.unsafeGetTensorImpl());
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : fsdp.wrapped()->named_parameters()) {
    if (!sharded.contains(p.value().unsafeGetTensorImpl())) {
      out.emplace_back(p.key(), p.value());
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<StateDict> FullOptimStateDict(FullyShardedDataParallel& fsdp,
                                             torch::optim::Optimizer& optimizer,
                                             bool rank0_only) {
  DK_RETURN_IF_ERROR(NewState(optimizer).status());  // one type on every rank
  ProcessGroup& group = *fsdp.group();
  const auto names = NamesOf(fsdp);
  // The ranks agree on how many of the units' parameters have state (the
  // gathers below are collective); an unsupported optimizer is an error
  // on every rank too.
  int64_t with_state = 0;
  absl::Status supported = absl::OkStatus();
  for (int k = 0; k < fsdp.num_units(); ++k) {
    for (const auto& p : fsdp.unit_params(k)) {
      if (OptimizerParamState* s = StateOf(optimizer, p)) {
        ++with_state;
        if (supported.ok()) supported = FieldsOf(*s).status();
      }
    }
  }
  int64_t agree[3] = {with_state, -with_state, supported.ok() ? 0 : 1};
  // Staged onto the comm device: an NCCL group takes no host memory.
  DK_RETURN_IF_ERROR(OnCommDevice(
      TensorRef(agree, 3, DataType::kInt64), group.comm_device(),
      Access::kReadWrite,
      [&](const TensorRef& t) { return group.AllReduce(t, ReduceOp::kMax); }));
  DK_RETURN_IF_ERROR(supported);
  if (agree[2] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": another rank's optimizer is not supported; ", kSupported));
  }
  if (agree[0] != -agree[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": the ranks' optimizers hold state for different numbers of ",
        "parameters (", -agree[1], " to ", agree[0], ")"));
  }
  const bool mine = !rank0_only || fsdp.job_rank0();
  StateDict out;
  if (mine) {
    for (const auto& [name, p] : Unsharded(fsdp)) {
      OptimizerParamState* s = StateOf(optimizer, p);
      if (s == nullptr) continue;
      DK_ASSIGN_OR_RETURN(Fields fields, FieldsOf(*s));
      for (const auto& [field, tensor] : fields.tensors) {
        if (tensor->defined()) {
          out.insert(Key(name, field), tensor->to(torch::kCPU).clone());
        }
      }
      if (fields.step != nullptr) {
        out.insert(Key(name, "step"),
                   torch::tensor(*fields.step, torch::kLong));
      }
    }
  }
  if (with_state == 0) return out;
  for (int k = 0; k < fsdp.num_units(); ++k) {
    FlatShard& shard = fsdp.unit_shard(k);
    const auto& params = fsdp.unit_params(k);
    const auto& shapes = fsdp.unit_param_shapes(k);
    // Each state field, one flat buffer at a time: this rank's pieces put
    // at their places in a shard-sized buffer, all-gathered, cut back into
    // full parameters. Fields come in one order for every parameter.
    std::vector<Fields> fields(params.size());
    std::vector<bool> has(params.size(), false);
    for (size_t i = 0; i < params.size(); ++i) {
      if (OptimizerParamState* s = StateOf(optimizer, params[i])) {
        DK_ASSIGN_OR_RETURN(fields[i], FieldsOf(*s));
        has[i] = true;
      }
    }
    const Fields* any = nullptr;
    for (size_t i = 0; i < params.size() && any == nullptr; ++i) {
      if (has[i]) any = &fields[i];
    }
    if (any == nullptr) continue;  // on every rank: the counts agreed
    for (int flat = 0; flat < shard.num_flat(); ++flat) {
      const TensorRef local = shard.Shard(flat);
      const int64_t s = local.numel();
      const int n = shard.shard_count();
      int first = -1;
      for (int i = 0; i < shard.num_params() && first < 0; ++i) {
        if (shard.placement(i).flat == flat) first = i;
      }
      const auto options = params[first].options();
      for (size_t f = 0; f < any->tensors.size(); ++f) {
        // Defined for one parameter: defined for all (one optimizer).
        if (!any->tensors[f].second->defined()) continue;
        torch::Tensor buffer = torch::zeros({s}, options);
        for (int i = 0; i < shard.num_params(); ++i) {
          const FlatShard::Placement& place = shard.placement(i);
          const FlatShard::LocalPiece piece = shard.Piece(i);
          if (place.flat != flat || !has[i] || piece.numel == 0) continue;
          const torch::Tensor& value = *fields[i].tensors[f].second;
          buffer
              .narrow(
                  0, place.offset + piece.param_offset - shard.shard_rank() * s,
                  piece.numel)
              .copy_(value.reshape(-1));
        }
        torch::Tensor full = buffer;
        if (n > 1) {
          full = torch::empty({s * n}, options);
          DK_ASSIGN_OR_RETURN(TensorRef in,
                              AsTensorRef(buffer, kOwner, "state"));
          DK_ASSIGN_OR_RETURN(TensorRef all,
                              AsTensorRef(full, kOwner, "state"));
          // The state of offloaded shards is on the host: staged.
          DK_RETURN_IF_ERROR(
              InOutOnCommDevice(in, all, group.comm_device(),
                                [&](const TensorRef& i, const TensorRef& o) {
                                  return group.AllGather(i, o);
                                }));
        }
        if (!mine) continue;
        for (int i = 0; i < shard.num_params(); ++i) {
          const FlatShard::Placement& place = shard.placement(i);
          if (place.flat != flat || !has[i]) continue;
          out.insert(Key(names.at(params[i].unsafeGetTensorImpl()),
                         any->tensors[f].first),
                     full.narrow(0, place.offset, place.numel)
                         .reshape(shapes[i])
                         .to(torch::kCPU)
                         .clone());
        }
      }
    }
    if (mine && any->step != nullptr) {
      for (size_t i = 0; i < params.size(); ++i) {
        if (!has[i]) continue;
        out.insert(Key(names.at(params[i].unsafeGetTensorImpl()), "step"),
                   torch::tensor(*fields[i].step, torch::kLong));
      }
    }
  }
  return out;
}

absl::Status LoadFullOptimStateDict(FullyShardedDataParallel& fsdp,
                                    torch::optim::Optimizer& optimizer,
                                    const StateDict& state) {
  const auto names = NamesOf(fsdp);
  // Everything checked before anything changes.
  struct Load {
    torch::Tensor param;
    std::unique_ptr<OptimizerParamState> state;
  };
  std::vector<Load> loads;
  size_t used = 0;
  // Parameter `param` (full size `numel`) keeps elements [offset, offset +
  // count) of each saved tensor.
  auto prepare = [&](const std::string& name, const torch::Tensor& param,
                     int64_t numel, int64_t offset,
                     int64_t count) -> absl::Status {
    DK_ASSIGN_OR_RETURN(auto fresh, NewState(optimizer));
    DK_ASSIGN_OR_RETURN(Fields fields, FieldsOf(*fresh));
    size_t found = 0;
    for (auto& [field, tensor] : fields.tensors) {
      const torch::Tensor* saved = state.find(Key(name, field));
      if (saved == nullptr) continue;
      if (saved->numel() != numel) {
        return absl::InvalidArgumentError(
            absl::StrCat("LoadFullOptimStateDict: ", Key(name, field), " has ",
                         saved->numel(), " elements; the parameter ", numel,
                         " (the state of another model?)"));
      }
      *tensor = saved->reshape(-1)
                    .narrow(0, offset, count)
                    .to(param.options())
                    .clone()
                    .view(param.numel() == count ? param.sizes()
                                                 : c10::IntArrayRef(count));
      ++found;
    }
    if (fields.step != nullptr) {
      if (const torch::Tensor* step = state.find(Key(name, "step"))) {
        *fields.step = step->item<int64_t>();
        ++found;
      }
    }
    if (found == 0) return absl::OkStatus();  // no state for this parameter
    if (!fields.tensors[0].second->defined()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoadFullOptimStateDict: no ", Key(name, fields.tensors[0].first),
          " (the state of another optimizer?)"));
    }
    used += found;
    loads.push_back({param, std::move(fresh)});
    return absl::OkStatus();
  };
  for (int k = 0; k < fsdp.num_units(); ++k) {
    FlatShard& shard = fsdp.unit_shard(k);
    const auto& params = fsdp.unit_params(k);
    for (size_t i = 0; i < params.size(); ++i) {
      const FlatShard::LocalPiece piece = shard.Piece(static_cast<int>(i));
      DK_RETURN_IF_ERROR(prepare(names.at(params[i].unsafeGetTensorImpl()),
                                 params[i],
                                 shard.placement(static_cast<int>(i)).numel,
                                 piece.param_offset, piece.numel));
    }
  }
  for (const auto& [name, p] : Unsharded(fsdp)) {
    DK_RETURN_IF_ERROR(prepare(name, p, p.numel(), 0, p.numel()));
  }
  if (used != state.size()) {
    for (const auto& item : state) {
      bool known = false;
      for (const auto& [impl, name] : names) {
        known |=
            absl::StartsWith(item.key(), absl::StrCat("state.", name, "."));
      }
      if (!known) {
        return absl::InvalidArgumentError(
            absl::StrCat("LoadFullOptimStateDict: unexpected key ", item.key(),
                         " (the state of another model?)"));
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "LoadFullOptimStateDict: ", state.size() - used,
        " entries are not this optimizer's fields (another optimizer?)"));
  }
  for (Load& load : loads) {
    optimizer.state()[StateKey(load.param)] = std::move(load.state);
  }
  return absl::OkStatus();
}

}  // namespace distkit
