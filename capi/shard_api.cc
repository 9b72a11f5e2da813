// The C ABI, section "Sharded units": fully sharded data parallel
// (distkit::FlatShard) for trainers without it.

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "capi/entry_point.h"
#include "cc/core/data_type.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/process_group.h"
#include "cc/parallel/flat_shard.h"
#include "distkit/distkit.h"

struct dk_shard {
  std::unique_ptr<distkit::FlatShard> rep;
};

namespace distkit {
namespace capi {
namespace {

void ShardConfigDefaults(dk_shard_config_t* config) {
  config->strategy = DK_SHARD_FULL_SHARD;
  config->param_dtype = DK_DTYPE_UNSET;
  config->reduce_dtype = DK_DTYPE_UNSET;
}

// The options, and (*frozen) the config's per-parameter frozen flags.
absl::StatusOr<FlatShard::Options> ReadShardConfig(
    const dk_shard_config_t* config, const int32_t** frozen) {
  DK_ASSIGN_OR_RETURN(
      dk_shard_config_t c,
      ReadVersionedStruct(config, &ShardConfigDefaults, "dk_shard_config",
                          {DK_FIELD_SPAN(dk_shard_config_t, strategy),
                           DK_FIELD_SPAN(dk_shard_config_t, param_dtype),
                           DK_FIELD_SPAN(dk_shard_config_t, reduce_dtype),
                           DK_FIELD_SPAN(dk_shard_config_t, offload_params),
                           DK_FIELD_SPAN(dk_shard_config_t, sync_module_states),
                           DK_FIELD_SPAN(dk_shard_config_t, reserved),
                           DK_FIELD_SPAN(dk_shard_config_t, replicate_group),
                           DK_FIELD_SPAN(dk_shard_config_t, frozen)}));
  *frozen = c.frozen;
  FlatShard::Options o;
  if (c.strategy < DK_SHARD_FULL_SHARD ||
      c.strategy > DK_SHARD_HYBRID_SHARD_ZERO2) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: unknown strategy ", c.strategy));
  }
  o.strategy = static_cast<ShardingStrategy>(c.strategy);
  for (auto [code, field, name] :
       {std::make_tuple(c.param_dtype, &o.param_dtype, "param_dtype"),
        std::make_tuple(c.reduce_dtype, &o.reduce_dtype, "reduce_dtype")}) {
    if (code == DK_DTYPE_UNSET) continue;
    absl::StatusOr<DataType> dt = DataTypeFromInt(code);
    if (!dt.ok()) return Annotate(dt.status(), absl::StrCat("config: ", name));
    *field = *dt;
  }
  o.offload_params = c.offload_params != 0;
  o.sync_module_states = c.sync_module_states != 0;
  if (c.replicate_group != nullptr) {
    DK_ASSIGN_OR_RETURN(o.replicate_group, GroupOf(c.replicate_group));
  }
  return o;
}

absl::StatusOr<FlatShard*> ShardOf(dk_shard_t* shard) {
  if (shard == nullptr || shard->rep == nullptr)
    return absl::InvalidArgumentError("shard is NULL");
  return shard->rep.get();
}

// Guard for a call on a unit: `body` (a callable or a member function of
// FlatShard) is invoked with the FlatShard behind `shard`.
template <typename F>
dk_status_t OnShard(dk_shard_t* shard, dk_error_t** err, F&& body) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(FlatShard * s, ShardOf(shard));
    return std::invoke(std::forward<F>(body), s);
  });
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::FlatShard;
using ::distkit::capi::OnShard;
using ::distkit::capi::ReadShardConfig;
using ::distkit::capi::ShardConfigDefaults;

extern "C" {

void dk_shard_config_init(dk_shard_config_t* config) {
  InitVersionedStruct(config,
                      DK_SIZE_THROUGH(dk_shard_config_t, replicate_group),
                      &ShardConfigDefaults);
}

void dk_shard_config_init_sized(dk_shard_config_t* config, size_t size) {
  InitVersionedStruct(config, size, &ShardConfigDefaults);
}

dk_status_t dk_shard_create(dk_group_t* group, DLTensor* const* params,
                            size_t num_params, const char* const* names,
                            const dk_shard_config_t* config, dk_shard_t** out,
                            dk_error_t** err) {
  return NewHandle(out, err, [&]() -> absl::StatusOr<dk_shard*> {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    const int32_t* frozen = nullptr;
    DK_ASSIGN_OR_RETURN(FlatShard::Options o, ReadShardConfig(config, &frozen));
    DK_ASSIGN_OR_RETURN(std::vector<TensorRef> ts,
                        TensorArgs(params, num_params, "params", false));
    std::vector<FlatShard::Parameter> ps;
    for (size_t i = 0; i < ts.size(); ++i) {
      ps.push_back({ts[i],
                    names != nullptr && names[i] != nullptr
                        ? std::string(names[i])
                        : absl::StrCat("params[", i, "]"),
                    frozen != nullptr && frozen[i] != 0});
    }
    DK_ASSIGN_OR_RETURN(std::unique_ptr<FlatShard> unit,
                        FlatShard::Create(g, std::move(ps), o));
    return new dk_shard{std::move(unit)};
  });
}

void dk_shard_destroy(dk_shard_t* shard) { delete shard; }

dk_status_t dk_shard_unshard_start(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, &FlatShard::StartUnshard);
}

dk_status_t dk_shard_unshard_wait(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, &FlatShard::WaitUnshard);
}

dk_status_t dk_shard_unshard(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, &FlatShard::Unshard);
}

dk_status_t dk_shard_reshard(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, &FlatShard::Reshard);
}

dk_status_t dk_shard_full_param(dk_shard_t* shard, int32_t index,
                                void** data_out, dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) {
    return ReturnData(data_out, &FlatShard::FullParam, s, index);
  });
}

dk_status_t dk_shard_accumulate_grad(dk_shard_t* shard, int32_t index,
                                     const DLTensor* grad, dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(TensorRef g, TensorArg(grad, "grad"));
    return s->AccumulateGrad(index, g);
  });
}

dk_status_t dk_shard_full_grad(dk_shard_t* shard, int32_t index,
                               void** data_out, dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) {
    return ReturnData(data_out, &FlatShard::FullGrad, s, index);
  });
}

dk_status_t dk_shard_reduce_grads(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, &FlatShard::ReduceScatterGrads);
}

dk_status_t dk_shard_reduce_grads_start(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, &FlatShard::StartReduceScatterGrads);
}

dk_status_t dk_shard_reduce_grads_wait(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, &FlatShard::WaitReduceScatterGrads);
}

void dk_shard_set_require_sync(dk_shard_t* shard, int32_t require_sync) {
  if (shard == nullptr || shard->rep == nullptr) return;
  BestEffort([&] { shard->rep->set_require_sync(require_sync != 0); });
}

int32_t dk_shard_num_flat(const dk_shard_t* shard) {
  if (shard == nullptr || shard->rep == nullptr) return 0;
  return NoThrow(0, [&] { return shard->rep->num_flat(); });
}

dk_status_t dk_shard_local(dk_shard_t* shard, int32_t flat, void** data_out,
                           void** grad_out, int64_t* numel_out,
                           dk_dtype_t* dtype_out, dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) -> absl::Status {
    if (flat < 0 || flat >= s->num_flat()) {
      return absl::OutOfRangeError(
          absl::StrCat("flat: ", flat, " is not in [0, ", s->num_flat(), ")"));
    }
    const TensorRef data = s->Shard(flat);
    if (data_out != nullptr) *data_out = data.data();
    if (grad_out != nullptr) *grad_out = s->ShardGrad(flat).data();
    if (numel_out != nullptr) *numel_out = data.numel();
    if (dtype_out != nullptr)
      *dtype_out = static_cast<dk_dtype_t>(data.dtype());
    return absl::OkStatus();
  });
}

void dk_shard_zero_grads(dk_shard_t* shard) {
  if (shard == nullptr || shard->rep == nullptr) return;
  BestEffort([&] { shard->rep->ZeroShardGrads(); });
}

dk_status_t dk_shard_piece(dk_shard_t* shard, int32_t index,
                           int64_t* offset_out, int64_t* numel_out,
                           void** data_out, void** grad_out, dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) -> absl::Status {
    if (index < 0 || index >= s->num_params()) {
      return absl::OutOfRangeError(absl::StrCat(
          "index: ", index, " is not in [0, ", s->num_params(), ")"));
    }
    const distkit::FlatShard::LocalPiece p = s->Piece(index);
    if (offset_out != nullptr) *offset_out = p.param_offset;
    if (numel_out != nullptr) *numel_out = p.numel;
    if (data_out != nullptr) *data_out = p.data.data();
    if (grad_out != nullptr) *grad_out = p.grad.data();
    return absl::OkStatus();
  });
}

dk_status_t dk_shard_gather_full(dk_shard_t* shard, DLTensor* const* outs,
                                 size_t n, int32_t rank0_only,
                                 dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) -> absl::Status {
    absl::StatusOr<std::vector<TensorRef>> ts =
        TensorArgs(outs, n, "outs", rank0_only != 0);
    if (!ts.ok()) {
      // The gathers are collective: this rank still takes part (writing
      // nothing), so that the others do not wait for it to the timeout,
      // and then answers with its own error.
      (void)s->GatherFullParams({}, rank0_only != 0);
      return ts.status();
    }
    return s->GatherFullParams(*ts, rank0_only != 0);
  });
}

dk_status_t dk_shard_load_full(dk_shard_t* shard, DLTensor* const* values,
                               size_t n, int32_t rank0_only, dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) -> absl::Status {
    // Not returned here: with rank0_only, rank 0's error must reach the
    // other ranks (they would wait for its broadcast), and theirs do not
    // matter (their values are not used).
    absl::StatusOr<std::vector<TensorRef>> ts =
        TensorArgs(values, n, "values", rank0_only != 0);
    if (!ts.ok()) return s->LoadFullParams({}, rank0_only != 0, ts.status());
    return s->LoadFullParams(*ts, rank0_only != 0);
  });
}

dk_status_t dk_shard_load_sharded(dk_shard_t* shard, int32_t saved_world_size,
                                  const DLTensor* const* saved,
                                  size_t num_saved, dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) -> absl::Status {
    if (saved_world_size <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("saved_world_size: ", saved_world_size, " must be > 0"));
    }
    const size_t want = static_cast<size_t>(s->num_flat()) * saved_world_size;
    if (num_saved != want || saved == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("saved: ", num_saved, " shards for ", s->num_flat(),
                       " flat buffers saved by ", saved_world_size,
                       " ranks (want ", want, ")"));
    }
    distkit::FlatShard::ShardMetadata meta = s->Metadata();
    meta.world_size = saved_world_size;
    return s->LoadShardedParams(
        meta, [&](int flat, int rank) -> absl::StatusOr<TensorRef> {
          const DLTensor* t = saved[flat * saved_world_size + rank];
          return TensorArg(
              t, absl::StrCat("saved[", flat * saved_world_size + rank, "]")
                     .c_str());
        });
  });
}

int64_t dk_shard_held_bytes(const dk_shard_t* shard) {
  if (shard == nullptr || shard->rep == nullptr) return 0;
  return NoThrow(int64_t{0}, [&] {
    return static_cast<int64_t>(shard->rep->held_bytes());
  });
}

int64_t dk_shard_peak_held_bytes(const dk_shard_t* shard) {
  if (shard == nullptr || shard->rep == nullptr) return 0;
  return NoThrow(int64_t{0}, [&] {
    return static_cast<int64_t>(shard->rep->peak_held_bytes());
  });
}

static_assert(
    distkit::FlatShard::Event::kUnshardStart == DK_SHARD_EVENT_UNSHARD_START &&
        distkit::FlatShard::Event::kUnshardDone ==
            DK_SHARD_EVENT_UNSHARD_DONE &&
        distkit::FlatShard::Event::kReshard == DK_SHARD_EVENT_RESHARD &&
        distkit::FlatShard::Event::kReduceStart ==
            DK_SHARD_EVENT_REDUCE_START &&
        distkit::FlatShard::Event::kReduceDone == DK_SHARD_EVENT_REDUCE_DONE,
    "dk_shard_event_t kinds are FlatShard::Event kinds");

dk_status_t dk_shard_take_events(dk_shard_t* shard, dk_shard_event_t* out,
                                 size_t capacity, size_t* count,
                                 dk_error_t** err) {
  return OnShard(shard, err, [&](FlatShard* s) -> absl::Status {
    if (count == nullptr) return absl::InvalidArgumentError("count is NULL");
    *count = 0;
    if (capacity > 0 && out == nullptr)
      return absl::InvalidArgumentError("out is NULL");
    const absl::Time base = s->created_at();
    for (const auto& e : s->TakeEvents(capacity)) {
      out[*count] = {absl::ToUnixNanos(base + e.at),
                     static_cast<int32_t>(e.kind), 0};
      ++*count;
    }
    return absl::OkStatus();
  });
}

}  // extern "C"
