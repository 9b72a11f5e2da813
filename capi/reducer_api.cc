// The C ABI, section "Gradient reducer": the engine of distributed data
// parallel (distkit::GradReducer) for trainers without one.

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "capi/entry_point.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/process_group.h"
#include "cc/parallel/grad_reducer.h"
#include "distkit/distkit.h"

struct dk_reducer {
  std::unique_ptr<distkit::GradReducer> rep;
};

namespace distkit {
namespace capi {
namespace {

void ReducerConfigDefaults(dk_reducer_config_t* config) {
  const GradReducer::Options d;
  config->bucket_cap_mb = d.bucket_cap_mb;
  config->first_bucket_cap_mb = d.first_bucket_cap_mb;
  config->find_unused_parameters = d.find_unused_parameters;
  config->gradient_as_bucket_view = d.gradient_as_bucket_view;
  config->broadcast_buffers = d.broadcast_buffers;
  config->comm_hook = DK_COMM_HOOK_NONE;
}

absl::StatusOr<GradReducer::Options> ReadReducerConfig(
    const dk_reducer_config_t* config) {
  DK_ASSIGN_OR_RETURN(
      dk_reducer_config_t c,
      ReadVersionedStruct(
          config, &ReducerConfigDefaults, "dk_reducer_config",
          {DK_FIELD_SPAN(dk_reducer_config_t, bucket_cap_mb),
           DK_FIELD_SPAN(dk_reducer_config_t, first_bucket_cap_mb),
           DK_FIELD_SPAN(dk_reducer_config_t, find_unused_parameters),
           DK_FIELD_SPAN(dk_reducer_config_t, gradient_as_bucket_view),
           DK_FIELD_SPAN(dk_reducer_config_t, broadcast_buffers),
           DK_FIELD_SPAN(dk_reducer_config_t, comm_hook)}));
  if (c.comm_hook < DK_COMM_HOOK_NONE || c.comm_hook > DK_COMM_HOOK_BF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: unknown comm_hook ", c.comm_hook));
  }
  GradReducer::Options o;
  o.bucket_cap_mb = c.bucket_cap_mb;
  o.first_bucket_cap_mb = c.first_bucket_cap_mb;
  o.find_unused_parameters = c.find_unused_parameters != 0;
  o.gradient_as_bucket_view = c.gradient_as_bucket_view != 0;
  o.broadcast_buffers = c.broadcast_buffers != 0;
  o.comm_hook = static_cast<CommHook>(c.comm_hook);
  return o;
}

// Guard for a call on a reducer: `body` (a callable or a member function of
// GradReducer) is invoked on the GradReducer behind `reducer`.
template <typename F>
dk_status_t OnReducer(dk_reducer_t* reducer, dk_error_t** err, F&& body) {
  return OnHandle(reducer, "reducer", err, [&](dk_reducer& r) {
    return std::invoke(std::forward<F>(body), *r.rep);
  });
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::GradReducer;
using ::distkit::capi::OnReducer;
using ::distkit::capi::ReadReducerConfig;
using ::distkit::capi::ReducerConfigDefaults;

extern "C" {

void dk_reducer_config_init(dk_reducer_config_t* config) {
  InitVersionedStruct(config, DK_SIZE_THROUGH(dk_reducer_config_t, comm_hook),
                      &ReducerConfigDefaults);
}

void dk_reducer_config_init_sized(dk_reducer_config_t* config, size_t size) {
  InitVersionedStruct(config, size, &ReducerConfigDefaults);
}

dk_status_t dk_reducer_create(dk_group_t* group, DLTensor* const* params,
                              size_t num_params, DLTensor* const* buffers,
                              size_t num_buffers,
                              const dk_reducer_config_t* config,
                              dk_reducer_t** out, dk_error_t** err) {
  return NewHandle(out, err, [&]() -> absl::StatusOr<dk_reducer*> {
    if (num_params > 0) DK_RETURN_IF_ERROR(NotNull(params, "params"));
    if (num_buffers > 0) DK_RETURN_IF_ERROR(NotNull(buffers, "buffers"));
    DK_RETURN_IF_ERROR(CheckCount(num_params, sizeof(DLTensor*), "num_params"));
    DK_RETURN_IF_ERROR(
        CheckCount(num_buffers, sizeof(DLTensor*), "num_buffers"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(GradReducer::Options o, ReadReducerConfig(config));
    // The counts are checked above, so TensorArgs reports only the tensors.
    DK_ASSIGN_OR_RETURN(std::vector<TensorRef> ts,
                        TensorArgs(params, num_params, "params", false));
    std::vector<GradReducer::Parameter> ps;
    for (size_t i = 0; i < ts.size(); ++i) {
      ps.push_back({ts[i], absl::StrCat("params[", i, "]")});
    }
    DK_ASSIGN_OR_RETURN(std::vector<TensorRef> bs,
                        TensorArgs(buffers, num_buffers, "buffers", false));
    DK_ASSIGN_OR_RETURN(
        std::unique_ptr<GradReducer> r,
        GradReducer::Create(g, std::move(ps), std::move(bs), o));
    return new dk_reducer{std::move(r)};
  });
}

void dk_reducer_destroy(dk_reducer_t* reducer) { delete reducer; }

dk_status_t dk_reducer_prepare(dk_reducer_t* reducer, const int32_t* unused,
                               size_t num_unused, dk_error_t** err) {
  return OnReducer(reducer, err, [&](GradReducer& r) -> absl::Status {
    if (num_unused > 0) DK_RETURN_IF_ERROR(NotNull(unused, "unused"));
    DK_RETURN_IF_ERROR(CheckCount(num_unused, sizeof(int32_t), "num_unused"));
    return r.PrepareForBackward(std::vector<int>(unused, unused + num_unused));
  });
}

dk_status_t dk_reducer_mark_ready(dk_reducer_t* reducer, int32_t index,
                                  const DLTensor* grad, dk_error_t** err) {
  return OnReducer(reducer, err, [&](GradReducer& r) -> absl::Status {
    DK_ASSIGN_OR_RETURN(TensorRef t, TensorArg(grad, "grad"));
    return r.MarkReady(index, t);
  });
}

dk_status_t dk_reducer_finalize(dk_reducer_t* reducer, dk_error_t** err) {
  return OnReducer(reducer, err, &GradReducer::Finalize);
}

dk_status_t dk_reducer_abandon(dk_reducer_t* reducer, dk_error_t** err) {
  return OnReducer(reducer, err, [](GradReducer& r) {
    r.AbandonIteration();
    return absl::OkStatus();
  });
}

void dk_reducer_set_require_sync(dk_reducer_t* reducer, int32_t require_sync) {
  if (reducer == nullptr) return;
  BestEffort([&] { reducer->rep->set_require_sync(require_sync != 0); });
}

dk_status_t dk_reducer_broadcast_buffers(dk_reducer_t* reducer,
                                         dk_error_t** err) {
  return OnReducer(reducer, err, &GradReducer::BroadcastBuffers);
}

dk_status_t dk_reducer_grad_view(dk_reducer_t* reducer, int32_t index,
                                 void** data_out, dk_error_t** err) {
  return OnReducer(reducer, err, [&](GradReducer& r) {
    return ReturnData(data_out, &GradReducer::GradView, r, index);
  });
}

int64_t dk_reducer_view_generation(const dk_reducer_t* reducer) {
  if (reducer == nullptr) return -1;
  return NoThrow(int64_t{-1}, [&] { return reducer->rep->view_generation(); });
}

dk_status_t dk_reducer_reduced_grad(dk_reducer_t* reducer, int32_t index,
                                    void** data_out, dk_error_t** err) {
  return OnReducer(reducer, err, [&](GradReducer& r) {
    return ReturnData(data_out, &GradReducer::ReducedGrad, r, index);
  });
}

int32_t dk_reducer_globally_used(const dk_reducer_t* reducer, int32_t index) {
  if (reducer == nullptr) return 0;
  return NoThrow(0, [&] { return reducer->rep->globally_used(index) ? 1 : 0; });
}

int32_t dk_reducer_num_buckets(const dk_reducer_t* reducer) {
  if (reducer == nullptr) return 0;
  return NoThrow(
      0, [&] { return static_cast<int32_t>(reducer->rep->buckets().size()); });
}

}  // extern "C"
