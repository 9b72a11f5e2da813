// The C ABI's only translation unit: handle structs, the one guard that turns
// absl::Status and any exception into dk_status_t + dk_error_t, and argument
// checks that name the argument.

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "capi/versioned_struct.h"
#include "cc/core/data_type.h"
#include "cc/core/device_copy.h"
#include "cc/core/reduce_op.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/dist_api/collect_results.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/object_collectives.h"
#include "cc/dist_api/parallel_state.h"
#include "cc/group/process_group.h"
#include "cc/group/shrink.h"
#include "cc/parallel/flat_shard.h"
#include "cc/parallel/grad_reducer.h"
#include "cc/store/request_limits.h"
#include "cc/store/store_server.h"
#include "cc/store/tcp_store.h"
#include "distkit/distkit.h"

struct dk_error {
  dk_status_t code;
  std::string message;
};

struct dk_store {
  std::shared_ptr<distkit::Store> rep;
  std::unique_ptr<distkit::StoreServer> server;  // set by dk_store_serve
  std::string address;
};

struct dk_group {
  std::shared_ptr<distkit::ProcessGroup> rep;
  bool destroyed = false;
};

struct dk_parallel_state {
  distkit::dist::ParallelState rep;
  bool destroyed = false;  // the handle stays reserved, like a group's
};

struct dk_reducer {
  std::unique_ptr<distkit::GradReducer> rep;
};

struct dk_shard {
  std::unique_ptr<distkit::FlatShard> rep;
};

struct dk_work {
  std::shared_ptr<distkit::Work> rep;
  // The group stays alive while its work is referenced.
  std::shared_ptr<distkit::ProcessGroup> group;
};

namespace {

using distkit::ProcessGroup;
using distkit::TensorRef;

dk_status_t Report(const absl::Status& status, dk_error_t** err) {
  if (status.ok()) return DK_OK;
  const dk_status_t code = static_cast<dk_status_t>(status.code());
  if (err != nullptr && *err == nullptr) {
    *err = new (std::nothrow) dk_error{code, std::string(status.message())};
  }
  return code;
}

// The guard every fallible entry point runs in: no exception leaves it.
template <typename F>
dk_status_t Guard(dk_error_t** err, F&& body) {
  absl::Status status;
  try {
    status = body();
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError("out of memory");
  } catch (const std::exception& e) {
    status =
        absl::InternalError(absl::StrCat("unexpected exception: ", e.what()));
  } catch (...) {
    status = absl::InternalError("unexpected non-standard exception");
  }
  return Report(status, err);
}

// A length argument the caller's array cannot have: more elements than the
// largest buffer holds. Checked before anything is read or allocated from it
// (a wrong length must be an error, not a read past the array or a crash in
// an allocator).
absl::Status CheckCount(size_t n, size_t element_size, const char* what) {
  if (n > static_cast<size_t>(TensorRef::kMaxBytes) / element_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", n, " is larger than any array can be (",
                     TensorRef::kMaxBytes, " bytes)"));
  }
  return absl::OkStatus();
}

// A value bound for the store: within the store's request limit.
absl::Status CheckStoreValue(size_t n, const char* what) {
  if (n > distkit::MaxStoreRequestBytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", n, " bytes is over the store's request limit of ",
        distkit::MaxStoreRequestBytes(), " (DISTKIT_STORE_MAX_REQUEST_BYTES)"));
  }
  return absl::OkStatus();
}

absl::Status NotNull(const void* p, const char* what) {
  if (p == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  return absl::OkStatus();
}

// A rank list cannot be longer than the group it is drawn from.
absl::Status CheckNumRanks(size_t num_ranks, const ProcessGroup& parent) {
  if (num_ranks > static_cast<size_t>(parent.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "new_group: num_ranks is ", num_ranks, ", more than group '",
        parent.name(), "' has (", parent.size(), ")"));
  }
  return absl::OkStatus();
}

// The group an argument names: itself, or the default group for NULL.
absl::StatusOr<std::shared_ptr<ProcessGroup>> GroupOf(dk_group_t* group) {
  if (group != nullptr) {
    if (group->destroyed) {
      return absl::FailedPreconditionError(
          "group: the handle was destroyed (dk_group_destroy)");
    }
    if (group->rep == nullptr)
      return absl::InvalidArgumentError("group: invalid handle");
    return group->rep;
  }
  std::shared_ptr<ProcessGroup> world = distkit::dist::GetDefaultGroup();
  if (world == nullptr) {
    return absl::FailedPreconditionError(
        "group is NULL and there is no default group: call dk_init first");
  }
  return world;
}

absl::StatusOr<TensorRef> Tensor(const DLTensor* t, const char* what) {
  return TensorRef::FromDLPack(t, what);
}

absl::StatusOr<distkit::ReduceOp> Op(dk_reduce_op_t op) {
  absl::StatusOr<distkit::ReduceOp> r = distkit::ReduceOpFromInt(op);
  if (!r.ok()) return distkit::Annotate(r.status(), "op");
  return r;
}

std::vector<std::string> Keys(const char* const* keys, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.emplace_back(keys[i]);
  return out;
}

absl::Status CheckKeys(const char* const* keys, size_t n) {
  DK_RETURN_IF_ERROR(CheckCount(n, sizeof(char*), "num_keys"));
  if (n > 0 && keys == nullptr)
    return absl::InvalidArgumentError("keys is NULL");
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("keys[", i, "] is NULL"));
  }
  return absl::OkStatus();
}

// Hands back an asynchronous operation's work (or waits for it when the
// caller asked for a blocking call). Argument errors surface at once either
// way, since a rejected operation's work is already complete.
absl::Status Finish(const std::shared_ptr<ProcessGroup>& group,
                    std::shared_ptr<distkit::Work> work, dk_work_t** work_out) {
  if (work_out == nullptr) return work->Wait();
  if (work->Test() && !work->status().ok()) return work->status();
  *work_out = new dk_work{std::move(work), group};
  return absl::OkStatus();
}

// One malloc block: the dk_bytes_t array, then every item's bytes.
absl::Status ReturnItems(const std::vector<std::string>& items,
                         dk_bytes_t** items_out, size_t* count_out) {
  size_t total = items.size() * sizeof(dk_bytes_t);
  for (const std::string& i : items) total += i.size();
  char* block = static_cast<char*>(std::malloc(total > 0 ? total : 1));
  if (block == nullptr) return absl::ResourceExhaustedError("out of memory");
  dk_bytes_t* array = reinterpret_cast<dk_bytes_t*>(block);
  char* cursor = block + items.size() * sizeof(dk_bytes_t);
  for (size_t k = 0; k < items.size(); ++k) {
    std::memcpy(cursor, items[k].data(), items[k].size());
    array[k].data = cursor;
    array[k].size = items[k].size();
    cursor += items[k].size();
  }
  *items_out = array;
  *count_out = items.size();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ReadItems(const dk_bytes_t* items,
                                                   size_t count,
                                                   const char* what) {
  DK_RETURN_IF_ERROR(CheckCount(count, sizeof(dk_bytes_t), what));
  if (count > 0 && items == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  std::vector<std::string> out;
  for (size_t k = 0; k < count; ++k) {
    if (items[k].size > 0 && items[k].data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "[", k, "].data is NULL"));
    }
    DK_RETURN_IF_ERROR(CheckCount(
        items[k].size, 1, absl::StrCat(what, "[", k, "].size").c_str()));
    out.emplace_back(static_cast<const char*>(items[k].data), items[k].size);
  }
  return out;
}

absl::Status CheckOuts(dk_bytes_t** items_out, size_t* count_out) {
  DK_RETURN_IF_ERROR(NotNull(items_out, "items_out"));
  DK_RETURN_IF_ERROR(NotNull(count_out, "count_out"));
  *items_out = nullptr;
  *count_out = 0;
  return absl::OkStatus();
}

}  // namespace

namespace {

// ---- Config structs (one rule: versioned_struct.h) ------------------------

absl::StatusOr<dk_store_config_t> ReadStoreConfig(
    const dk_store_config_t* config) {
  if (config == nullptr) return absl::InvalidArgumentError("config is NULL");
  DK_ASSIGN_OR_RETURN(
      dk_store_config_t c,
      distkit::capi::ReadVersionedStruct(
          config, &dk_store_config_init, "dk_store_config",
          {DK_FIELD_SPAN(dk_store_config_t, address),
           DK_FIELD_SPAN(dk_store_config_t, token),
           DK_FIELD_SPAN(dk_store_config_t, timeout_ms),
           DK_FIELD_SPAN(dk_store_config_t, connect_timeout_ms)}));
  if (c.address == nullptr)
    return absl::InvalidArgumentError("config: address is NULL");
  return c;
}

absl::StatusOr<distkit::dist::InitOptions> ReadInitConfig(
    const dk_init_config_t* config) {
  DK_ASSIGN_OR_RETURN(dk_init_config_t c,
                      distkit::capi::ReadVersionedStruct(
                          config, &dk_init_config_init, "dk_init_config",
                          {DK_FIELD_SPAN(dk_init_config_t, backend),
                           DK_FIELD_SPAN(dk_init_config_t, timeout_ms)}));
  distkit::dist::InitOptions options;
  options.backend = c.backend != nullptr ? c.backend : "gloo";
  if (c.timeout_ms <= 0)
    return absl::InvalidArgumentError("config: timeout_ms must be > 0");
  options.timeout = absl::Milliseconds(c.timeout_ms);
  return options;
}

absl::StatusOr<distkit::GradReducer::Options> ReadReducerConfig(
    const dk_reducer_config_t* config) {
  DK_ASSIGN_OR_RETURN(
      dk_reducer_config_t c,
      distkit::capi::ReadVersionedStruct(
          config, &dk_reducer_config_init, "dk_reducer_config",
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
  distkit::GradReducer::Options o;
  o.bucket_cap_mb = c.bucket_cap_mb;
  o.first_bucket_cap_mb = c.first_bucket_cap_mb;
  o.find_unused_parameters = c.find_unused_parameters != 0;
  o.gradient_as_bucket_view = c.gradient_as_bucket_view != 0;
  o.broadcast_buffers = c.broadcast_buffers != 0;
  o.comm_hook = static_cast<distkit::CommHook>(c.comm_hook);
  return o;
}

absl::StatusOr<distkit::FlatShard::Options> ReadShardConfig(
    const dk_shard_config_t* config) {
  DK_ASSIGN_OR_RETURN(dk_shard_config_t c,
                      distkit::capi::ReadVersionedStruct(
                          config, &dk_shard_config_init, "dk_shard_config",
                          {DK_FIELD_SPAN(dk_shard_config_t, strategy),
                           DK_FIELD_SPAN(dk_shard_config_t, param_dtype),
                           DK_FIELD_SPAN(dk_shard_config_t, reduce_dtype),
                           DK_FIELD_SPAN(dk_shard_config_t, offload_params),
                           DK_FIELD_SPAN(dk_shard_config_t, sync_module_states),
                           DK_FIELD_SPAN(dk_shard_config_t, reserved),
                           DK_FIELD_SPAN(dk_shard_config_t, replicate_group)}));
  distkit::FlatShard::Options o;
  if (c.strategy < DK_SHARD_FULL_SHARD ||
      c.strategy > DK_SHARD_HYBRID_SHARD_ZERO2) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: unknown strategy ", c.strategy));
  }
  o.strategy = static_cast<distkit::ShardingStrategy>(c.strategy);
  for (auto [code, field, name] :
       {std::make_tuple(c.param_dtype, &o.param_dtype, "param_dtype"),
        std::make_tuple(c.reduce_dtype, &o.reduce_dtype, "reduce_dtype")}) {
    if (code == DK_DTYPE_UNSET) continue;
    absl::StatusOr<distkit::DataType> dt = distkit::DataTypeFromInt(code);
    if (!dt.ok())
      return distkit::Annotate(dt.status(), absl::StrCat("config: ", name));
    *field = *dt;
  }
  o.offload_params = c.offload_params != 0;
  o.sync_module_states = c.sync_module_states != 0;
  if (c.replicate_group != nullptr) {
    DK_ASSIGN_OR_RETURN(o.replicate_group, GroupOf(c.replicate_group));
  }
  return o;
}

absl::StatusOr<distkit::FlatShard*> ShardOf(dk_shard_t* shard) {
  if (shard == nullptr || shard->rep == nullptr)
    return absl::InvalidArgumentError("shard is NULL");
  return shard->rep.get();
}

// Guard for a call on a unit: `body` gets the FlatShard behind `shard`.
template <typename F>
dk_status_t OnShard(dk_shard_t* shard, dk_error_t** err, F&& body) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(distkit::FlatShard * s, ShardOf(shard));
    return body(s);
  });
}

// Tensors from an array of DLTensor*; NULL entries allowed when `nullable`
// (they become empty TensorRefs).
absl::StatusOr<std::vector<TensorRef>> Tensors(DLTensor* const* tensors,
                                               size_t n, const char* what,
                                               bool nullable) {
  DK_RETURN_IF_ERROR(CheckCount(n, sizeof(DLTensor*), what));
  if (n > 0 && tensors == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  std::vector<TensorRef> out;
  for (size_t i = 0; i < n; ++i) {
    if (tensors[i] == nullptr && nullable) {
      out.emplace_back();
      continue;
    }
    DK_ASSIGN_OR_RETURN(
        TensorRef t,
        Tensor(tensors[i], absl::StrCat(what, "[", i, "]").c_str()));
    out.push_back(t);
  }
  return out;
}

// ---- Memory handed to the caller (freed with dk_free) ----------------------

// A malloc'd copy of `bytes` with a '\0' after them, so that a value is also
// a C string.
absl::StatusOr<char*> OwnedCopy(absl::string_view bytes) {
  char* copy = static_cast<char*>(std::malloc(bytes.size() + 1));
  if (copy == nullptr) return absl::ResourceExhaustedError("out of memory");
  std::memcpy(copy, bytes.data(), bytes.size());
  copy[bytes.size()] = '\0';
  return copy;
}

absl::Status ReturnBytes(absl::string_view bytes, void** data_out,
                         size_t* size_out) {
  DK_ASSIGN_OR_RETURN(char* copy, OwnedCopy(bytes));
  *data_out = copy;
  *size_out = bytes.size();
  return absl::OkStatus();
}

// ---- Parallel state ----------------------------------------------------

distkit::dist::DistributedProcessGroup DpgOf(dk_group_t* group) {
  if (group == DK_GROUP_UNUSED)
    return distkit::dist::DistributedProcessGroup::Unused();
  if (group == nullptr) return distkit::dist::DistributedProcessGroup();
  return distkit::dist::DistributedProcessGroup(group->rep);
}

const distkit::dist::DistributedProcessGroup* Which(
    const dk_parallel_state_t* state, int32_t which) {
  if (state == nullptr || state->destroyed) return nullptr;
  switch (which) {
    case DK_PARALLEL_DATA:
      return &state->rep.data_parallel_group;
    case DK_PARALLEL_TENSOR:
      return &state->rep.tensor_parallel_group;
    case DK_PARALLEL_EXPERT:
      return &state->rep.expert_model_parallel_group;
    default:
      return nullptr;
  }
}

}  // namespace

extern "C" {

// ---- Versions ---------------------------------------------------------------

dk_status_t dk_init_version(int32_t major, int32_t minor, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    if (major != DK_ABI_MAJOR || minor > DK_ABI_MINOR) {
      return absl::FailedPreconditionError(absl::StrCat(
          "distkit ABI mismatch: the caller was built for ", major, ".", minor,
          " but this library provides ", DK_ABI_MAJOR, ".", DK_ABI_MINOR));
    }
    return absl::OkStatus();
  });
}

void dk_get_version(int32_t* major, int32_t* minor) {
  if (major != nullptr) *major = DK_ABI_MAJOR;
  if (minor != nullptr) *minor = DK_ABI_MINOR;
}

// ---- Errors and memory ------------------------------------------------------

dk_status_t dk_error_code(const dk_error_t* err) {
  return err == nullptr ? DK_OK : err->code;
}

const char* dk_error_message(const dk_error_t* err) {
  return err == nullptr ? "" : err->message.c_str();
}

void dk_error_free(dk_error_t* err) { delete err; }

void dk_free(void* ptr) { std::free(ptr); }

// ---- Store ------------------------------------------------------------------

void dk_store_config_init(dk_store_config_t* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  config->timeout_ms = 300000;
  config->connect_timeout_ms = 300000;
}

dk_status_t dk_store_connect(const dk_store_config_t* config, dk_store_t** out,
                             dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(dk_store_config_t c, ReadStoreConfig(config));
    DK_ASSIGN_OR_RETURN(
        std::unique_ptr<distkit::TcpStore> store,
        distkit::TcpStore::Connect({c.address, c.token ? c.token : "",
                                    absl::Milliseconds(c.timeout_ms),
                                    absl::Milliseconds(c.connect_timeout_ms)}));
    *out = new dk_store{std::move(store), nullptr, c.address};
    return absl::OkStatus();
  });
}

dk_status_t dk_store_serve(const dk_store_config_t* config, dk_store_t** out,
                           dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(dk_store_config_t c, ReadStoreConfig(config));
    const std::string token = c.token ? c.token : "";
    DK_ASSIGN_OR_RETURN(std::unique_ptr<distkit::StoreServer> server,
                        distkit::StoreServer::Start({c.address, token}));
    DK_ASSIGN_OR_RETURN(
        std::unique_ptr<distkit::TcpStore> store,
        distkit::TcpStore::Connect({server->address(), token,
                                    absl::Milliseconds(c.timeout_ms),
                                    absl::Milliseconds(c.connect_timeout_ms)}));
    const std::string address = server->address();
    *out = new dk_store{std::move(store), std::move(server), address};
    return absl::OkStatus();
  });
}

dk_status_t dk_default_store(dk_store_t** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    std::shared_ptr<distkit::Store> store = distkit::dist::GetStore();
    if (store == nullptr) {
      return absl::FailedPreconditionError("default_store: not distributed");
    }
    *out = new dk_store{std::move(store), nullptr, ""};
    return absl::OkStatus();
  });
}

const char* dk_store_address(const dk_store_t* store) {
  return store == nullptr ? nullptr : store->address.c_str();
}

void dk_store_destroy(dk_store_t* store) { delete store; }

dk_status_t dk_store_set(dk_store_t* store, const char* key, const void* value,
                         size_t size, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(key, "key"));
    if (size > 0) DK_RETURN_IF_ERROR(NotNull(value, "value"));
    DK_RETURN_IF_ERROR(CheckStoreValue(size, "set: size"));
    return store->rep->Set(
        key, absl::string_view(static_cast<const char*>(value), size));
  });
}

dk_status_t dk_store_get(dk_store_t* store, const char* key, void** value_out,
                         size_t* size_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(key, "key"));
    DK_RETURN_IF_ERROR(NotNull(value_out, "value_out"));
    DK_RETURN_IF_ERROR(NotNull(size_out, "size_out"));
    DK_ASSIGN_OR_RETURN(std::string value, store->rep->Get(key));
    return ReturnBytes(value, value_out, size_out);
  });
}

dk_status_t dk_store_add(dk_store_t* store, const char* key, int64_t delta,
                         int64_t* out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(key, "key"));
    DK_ASSIGN_OR_RETURN(int64_t value, store->rep->Add(key, delta));
    if (out != nullptr) *out = value;
    return absl::OkStatus();
  });
}

dk_status_t dk_store_wait(dk_store_t* store, const char* const* keys,
                          size_t num_keys, int64_t timeout_ms,
                          dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(CheckKeys(keys, num_keys));
    const absl::Duration timeout =
        timeout_ms < 0 ? store->rep->timeout() : absl::Milliseconds(timeout_ms);
    return store->rep->Wait(Keys(keys, num_keys), timeout);
  });
}

dk_status_t dk_store_check(dk_store_t* store, const char* const* keys,
                           size_t num_keys, int32_t* out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_RETURN_IF_ERROR(CheckKeys(keys, num_keys));
    DK_ASSIGN_OR_RETURN(bool ready, store->rep->Check(Keys(keys, num_keys)));
    *out = ready ? 1 : 0;
    return absl::OkStatus();
  });
}

dk_status_t dk_store_delete_key(dk_store_t* store, const char* key,
                                int32_t* out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(key, "key"));
    DK_ASSIGN_OR_RETURN(bool deleted, store->rep->DeleteKey(key));
    if (out != nullptr) *out = deleted ? 1 : 0;
    return absl::OkStatus();
  });
}

dk_status_t dk_store_compare_set(dk_store_t* store, const char* key,
                                 const void* expected, size_t expected_size,
                                 const void* desired, size_t desired_size,
                                 void** value_out, size_t* size_out,
                                 dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(key, "key"));
    DK_RETURN_IF_ERROR(NotNull(value_out, "value_out"));
    DK_RETURN_IF_ERROR(NotNull(size_out, "size_out"));
    if (expected_size > 0) DK_RETURN_IF_ERROR(NotNull(expected, "expected"));
    if (desired_size > 0) DK_RETURN_IF_ERROR(NotNull(desired, "desired"));
    DK_RETURN_IF_ERROR(
        CheckStoreValue(expected_size, "compare_set: expected_size"));
    DK_RETURN_IF_ERROR(
        CheckStoreValue(desired_size, "compare_set: desired_size"));
    DK_ASSIGN_OR_RETURN(
        std::string value,
        store->rep->CompareSet(
            key,
            absl::string_view(static_cast<const char*>(expected),
                              expected_size),
            absl::string_view(static_cast<const char*>(desired),
                              desired_size)));
    return ReturnBytes(value, value_out, size_out);
  });
}

dk_status_t dk_store_append(dk_store_t* store, const char* key,
                            const void* value, size_t size, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(key, "key"));
    if (size > 0) DK_RETURN_IF_ERROR(NotNull(value, "value"));
    DK_RETURN_IF_ERROR(CheckStoreValue(size, "append: size"));
    return store->rep->Append(
        key, absl::string_view(static_cast<const char*>(value), size));
  });
}

dk_status_t dk_store_multi_set(dk_store_t* store, const char* const* keys,
                               const dk_bytes_t* values, size_t num_keys,
                               dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(CheckKeys(keys, num_keys));
    DK_ASSIGN_OR_RETURN(std::vector<std::string> vals,
                        ReadItems(values, num_keys, "values"));
    return store->rep->MultiSet(Keys(keys, num_keys), vals);
  });
}

dk_status_t dk_store_multi_get(dk_store_t* store, const char* const* keys,
                               size_t num_keys, dk_bytes_t** values_out,
                               dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(values_out, "values_out"));
    DK_RETURN_IF_ERROR(CheckKeys(keys, num_keys));
    DK_ASSIGN_OR_RETURN(std::vector<std::string> values,
                        store->rep->MultiGet(Keys(keys, num_keys)));
    size_t count = 0;
    return ReturnItems(values, values_out, &count);
  });
}

dk_status_t dk_store_num_keys(dk_store_t* store, int64_t* out,
                              dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(*out, store->rep->NumKeys());
    return absl::OkStatus();
  });
}

// ---- Groups -----------------------------------------------------------------

void dk_init_config_init(dk_init_config_t* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  config->backend = "gloo";
  config->timeout_ms = 1800000;
}

dk_status_t dk_init(const char* launcher, const dk_init_config_t* config,
                    dk_group_t** world_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(launcher, "launcher"));
    DK_RETURN_IF_ERROR(NotNull(world_out, "world_out"));
    DK_ASSIGN_OR_RETURN(distkit::dist::InitOptions options,
                        ReadInitConfig(config));
    DK_RETURN_IF_ERROR(distkit::dist::InitDist(launcher, options));
    *world_out = new dk_group{distkit::dist::GetDefaultGroup()};
    return absl::OkStatus();
  });
}

dk_status_t dk_init_with_store(dk_store_t* store, int32_t rank, int32_t size,
                               const dk_init_config_t* config,
                               dk_group_t** world_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(store, "store"));
    DK_RETURN_IF_ERROR(NotNull(world_out, "world_out"));
    DK_ASSIGN_OR_RETURN(distkit::dist::InitOptions options,
                        ReadInitConfig(config));
    DK_RETURN_IF_ERROR(
        distkit::dist::InitDistWithStore(store->rep, rank, size, options));
    *world_out = new dk_group{distkit::dist::GetDefaultGroup()};
    return absl::OkStatus();
  });
}

void dk_shutdown(void) { distkit::dist::DestroyDist(); }

int32_t dk_is_distributed(void) {
  return distkit::dist::IsDistributed() ? 1 : 0;
}

int32_t dk_group_rank(const dk_group_t* group) {
  if (group != nullptr && group->destroyed) return -1;
  if (group != nullptr && group->rep != nullptr) return group->rep->rank();
  return distkit::dist::GetRank();
}

int32_t dk_group_size(const dk_group_t* group) {
  if (group != nullptr && group->destroyed) return -1;
  if (group != nullptr && group->rep != nullptr) return group->rep->size();
  return distkit::dist::GetWorldSize();
}

int32_t dk_group_global_rank(const dk_group_t* group, int32_t group_rank) {
  if (group != nullptr && group->destroyed) return -1;
  if (group != nullptr && group->rep != nullptr) {
    const auto& ranks = group->rep->global_ranks();
    return group_rank >= 0 && group_rank < static_cast<int32_t>(ranks.size())
               ? ranks[group_rank]
               : -1;
  }
  return group_rank >= 0 && group_rank < distkit::dist::GetWorldSize()
             ? group_rank
             : -1;
}

const char* dk_group_backend(const dk_group_t* group) {
  if (group != nullptr && group->destroyed) return nullptr;
  if (group != nullptr && group->rep != nullptr)
    return group->rep->backend_name().c_str();
  std::shared_ptr<ProcessGroup> world = distkit::dist::GetDefaultGroup();
  return world != nullptr ? world->backend_name().c_str() : nullptr;
}

const char* dk_group_name(const dk_group_t* group) {
  if (group != nullptr && group->destroyed) return nullptr;
  if (group != nullptr && group->rep != nullptr)
    return group->rep->name().c_str();
  std::shared_ptr<ProcessGroup> world = distkit::dist::GetDefaultGroup();
  return world != nullptr ? world->name().c_str() : nullptr;
}

dk_status_t dk_group_new(dk_group_t* parent, const int32_t* ranks,
                         size_t num_ranks, dk_group_t** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    if (num_ranks > 0) DK_RETURN_IF_ERROR(NotNull(ranks, "ranks"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> p, GroupOf(parent));
    DK_RETURN_IF_ERROR(CheckNumRanks(num_ranks, *p));
    DK_ASSIGN_OR_RETURN(
        std::shared_ptr<ProcessGroup> g,
        p->NewGroup(std::vector<int>(ranks, ranks + num_ranks)));
    *out = new dk_group{std::move(g)};
    return absl::OkStatus();
  });
}

dk_status_t dk_group_new_named(dk_group_t* parent, const int32_t* ranks,
                               size_t num_ranks, const char* name,
                               dk_group_t** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_RETURN_IF_ERROR(NotNull(name, "name"));
    if (num_ranks > 0) DK_RETURN_IF_ERROR(NotNull(ranks, "ranks"));
    if (*name == '\0' || std::strchr(name, '/') != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "new_group_named: the name '", name, "' is empty or has a '/'"));
    }
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> p, GroupOf(parent));
    DK_RETURN_IF_ERROR(CheckNumRanks(num_ranks, *p));
    if (p->backend_name() != "gloo") {
      // MPI and NCCL split a subgroup from the parent: every rank of it
      // must take part (dk_group_new).
      return absl::UnimplementedError(absl::StrCat(
          "new_group_named: the ", p->backend_name(), " backend of group '",
          p->name(), "' needs every rank of it; use dk_group_new"));
    }
    distkit::GroupOptions options;
    options.backend = p->backend_name();
    options.timeout = p->timeout();
    options.name = absl::StrCat("named-", name);
    DK_ASSIGN_OR_RETURN(
        std::shared_ptr<ProcessGroup> g,
        p->NewGroup(std::vector<int>(ranks, ranks + num_ranks), options));
    *out = new dk_group{std::move(g)};
    return absl::OkStatus();
  });
}

void dk_group_destroy(dk_group_t* group) {
  if (group == nullptr || group->destroyed) return;
  // Releases the group but keeps the small handle (see the header): later
  // calls through it fail cleanly instead of reading freed memory.
  group->rep.reset();
  group->destroyed = true;
}

void dk_group_abort(dk_group_t* group) {
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = GroupOf(group);
  if (g.ok()) (*g)->Abort();
}

dk_status_t dk_group_shrink(dk_group_t* group, int64_t settle_ms,
                            dk_group_t** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    const absl::Duration settle =
        settle_ms < 0 ? absl::Seconds(5) : absl::Milliseconds(settle_ms);
    std::shared_ptr<ProcessGroup> shrunk;
    if (group == nullptr) {
      DK_ASSIGN_OR_RETURN(shrunk, distkit::dist::ShrinkDefaultGroup(settle));
    } else {
      DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
      DK_ASSIGN_OR_RETURN(shrunk, distkit::ShrinkGroup(*g, settle));
    }
    *out = new dk_group{std::move(shrunk)};
    return absl::OkStatus();
  });
}

dk_status_t dk_group_async_error(const dk_group_t* group, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g,
                        GroupOf(const_cast<dk_group_t*>(group)));
    return g->AsyncError();
  });
}

// ---- Work -------------------------------------------------------------------

dk_status_t dk_work_test(const dk_work_t* work, dk_work_state_t* state_out,
                         dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(work, "work"));
    DK_RETURN_IF_ERROR(NotNull(state_out, "state_out"));
    *state_out = static_cast<dk_work_state_t>(work->rep->state());
    return absl::OkStatus();
  });
}

dk_status_t dk_work_wait(dk_work_t* work, int64_t timeout_ms,
                         dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(work, "work"));
    return work->rep->Wait(timeout_ms < 0 ? absl::InfiniteDuration()
                                          : absl::Milliseconds(timeout_ms));
  });
}

void dk_work_destroy(dk_work_t* work) { delete work; }

// ---- Collectives ------------------------------------------------------------

dk_status_t dk_group_all_reduce(dk_group_t* group, DLTensor* data,
                                dk_reduce_op_t op, dk_work_t** work_out,
                                dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef t, Tensor(data, "data"));
    DK_ASSIGN_OR_RETURN(distkit::ReduceOp r, Op(op));
    if (work_out == nullptr) return g->AllReduce(t, r);
    return Finish(g, g->AllReduceAsync(t, r), work_out);
  });
}

dk_status_t dk_group_broadcast(dk_group_t* group, DLTensor* data, int32_t root,
                               dk_work_t** work_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef t, Tensor(data, "data"));
    if (work_out == nullptr) return g->Broadcast(t, root);
    return Finish(g, g->BroadcastAsync(t, root), work_out);
  });
}

dk_status_t dk_group_reduce(dk_group_t* group, DLTensor* data,
                            dk_reduce_op_t op, int32_t root,
                            dk_work_t** work_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef t, Tensor(data, "data"));
    DK_ASSIGN_OR_RETURN(distkit::ReduceOp r, Op(op));
    if (work_out == nullptr) return g->Reduce(t, r, root);
    return Finish(g, g->ReduceAsync(t, r, root), work_out);
  });
}

dk_status_t dk_group_all_gather(dk_group_t* group, const DLTensor* input,
                                DLTensor* output, dk_work_t** work_out,
                                dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef in, Tensor(input, "input"));
    DK_ASSIGN_OR_RETURN(TensorRef out, Tensor(output, "output"));
    if (work_out == nullptr) return g->AllGather(in, out);
    return Finish(g, g->AllGatherAsync(in, out), work_out);
  });
}

dk_status_t dk_group_gather(dk_group_t* group, const DLTensor* input,
                            DLTensor* output, int32_t root,
                            dk_work_t** work_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef in, Tensor(input, "input"));
    TensorRef out;
    if (g->rank() == root) {
      DK_ASSIGN_OR_RETURN(out, Tensor(output, "output"));
    }
    if (work_out == nullptr) return g->Gather(in, out, root);
    return Finish(g, g->GatherAsync(in, out, root), work_out);
  });
}

dk_status_t dk_group_scatter(dk_group_t* group, const DLTensor* input,
                             DLTensor* output, int32_t root,
                             dk_work_t** work_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef out, Tensor(output, "output"));
    TensorRef in;
    if (g->rank() == root) {
      DK_ASSIGN_OR_RETURN(in, Tensor(input, "input"));
    }
    if (work_out == nullptr) return g->Scatter(in, out, root);
    return Finish(g, g->ScatterAsync(in, out, root), work_out);
  });
}

dk_status_t dk_group_reduce_scatter(dk_group_t* group, const DLTensor* input,
                                    DLTensor* output, dk_reduce_op_t op,
                                    dk_work_t** work_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef in, Tensor(input, "input"));
    DK_ASSIGN_OR_RETURN(TensorRef out, Tensor(output, "output"));
    DK_ASSIGN_OR_RETURN(distkit::ReduceOp r, Op(op));
    if (work_out == nullptr) return g->ReduceScatter(in, out, r);
    return Finish(g, g->ReduceScatterAsync(in, out, r), work_out);
  });
}

dk_status_t dk_group_all_to_all(dk_group_t* group, const DLTensor* input,
                                const int64_t* input_splits, DLTensor* output,
                                const int64_t* output_splits, size_t num_splits,
                                dk_work_t** work_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef in, Tensor(input, "input"));
    DK_ASSIGN_OR_RETURN(TensorRef out, Tensor(output, "output"));
    if ((input_splits != nullptr || output_splits != nullptr) &&
        num_splits != static_cast<size_t>(g->size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all_to_all: num_splits is ", num_splits, ", but group '", g->name(),
          "' has ", g->size(), " ranks (one split per rank)"));
    }
    std::vector<int64_t> ins, outs;
    if (input_splits != nullptr)
      ins.assign(input_splits, input_splits + num_splits);
    if (output_splits != nullptr)
      outs.assign(output_splits, output_splits + num_splits);
    if (work_out == nullptr) return g->AllToAll(in, out, ins, outs);
    return Finish(g, g->AllToAllAsync(in, out, ins, outs), work_out);
  });
}

dk_status_t dk_group_barrier(dk_group_t* group, dk_work_t** work_out,
                             dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    if (work_out == nullptr) return g->Barrier();
    return Finish(g, g->BarrierAsync(), work_out);
  });
}

dk_status_t dk_group_send(dk_group_t* group, const DLTensor* data, int32_t dst,
                          int32_t tag, dk_work_t** work_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef t, Tensor(data, "data"));
    return Finish(g, g->SendAsync(t, dst, tag), work_out);
  });
}

dk_status_t dk_group_recv(dk_group_t* group, DLTensor* data, int32_t src,
                          int32_t tag, dk_work_t** work_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(TensorRef t, Tensor(data, "data"));
    return Finish(g, g->RecvAsync(t, src, tag), work_out);
  });
}

// ---- Local group ---------------------------------------------------------

dk_status_t dk_init_local_group(int32_t node_rank, int32_t num_per_node,
                                dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    return distkit::dist::InitLocalGroup(node_rank, num_per_node);
  });
}

dk_status_t dk_init_local_group_from_launcher(dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    return distkit::dist::InitLocalGroupFromLauncher();
  });
}

dk_status_t dk_local_group(dk_group_t** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> local,
                        distkit::dist::GetLocalGroup());
    *out = local == nullptr ? nullptr : new dk_group{std::move(local)};
    return absl::OkStatus();
  });
}

// ---- Several tensors, objects, results -----------------------------------

dk_status_t dk_group_all_reduce_coalesced(dk_group_t* group,
                                          DLTensor* const* tensors,
                                          size_t num_tensors, dk_reduce_op_t op,
                                          int32_t coalesce,
                                          int64_t bucket_size_mb,
                                          dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    if (num_tensors > 0) DK_RETURN_IF_ERROR(NotNull(tensors, "tensors"));
    DK_RETURN_IF_ERROR(
        CheckCount(num_tensors, sizeof(DLTensor*), "num_tensors"));
    std::vector<TensorRef> refs;
    for (size_t i = 0; i < num_tensors; ++i) {
      DK_ASSIGN_OR_RETURN(
          TensorRef t,
          Tensor(tensors[i], absl::StrCat("tensors[", i, "]").c_str()));
      refs.push_back(t);
    }
    DK_ASSIGN_OR_RETURN(distkit::ReduceOp r, Op(op));
    return distkit::dist::AllReduceParams(
        refs, coalesce != 0, static_cast<int>(bucket_size_mb), r, g.get());
  });
}

dk_status_t dk_group_sync_random_seed(dk_group_t* group, int32_t* out,
                                      dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    ProcessGroup* g = nullptr;
    if (group != nullptr || distkit::dist::IsDistributed()) {
      DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> pg, GroupOf(group));
      g = pg.get();
    }
    DK_ASSIGN_OR_RETURN(*out, distkit::dist::SyncRandomSeed(g));
    return absl::OkStatus();
  });
}

dk_status_t dk_group_all_gather_object(dk_group_t* group, const void* data,
                                       size_t size, dk_bytes_t** items_out,
                                       size_t* count_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    if (size > 0) DK_RETURN_IF_ERROR(NotNull(data, "data"));
    DK_RETURN_IF_ERROR(CheckCount(size, 1, "size"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(
        std::vector<std::string> all,
        distkit::dist::AllGatherObject(
            std::string(static_cast<const char*>(data), size), g.get()));
    return ReturnItems(all, items_out, count_out);
  });
}

dk_status_t dk_group_gather_object(dk_group_t* group, const void* data,
                                   size_t size, int32_t dst,
                                   dk_bytes_t** items_out, size_t* count_out,
                                   dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    if (size > 0) DK_RETURN_IF_ERROR(NotNull(data, "data"));
    DK_RETURN_IF_ERROR(CheckCount(size, 1, "size"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(
        std::optional<std::vector<std::string>> all,
        distkit::dist::GatherObject(
            std::string(static_cast<const char*>(data), size), dst, g.get()));
    if (!all.has_value()) return absl::OkStatus();
    return ReturnItems(*all, items_out, count_out);
  });
}

dk_status_t dk_group_broadcast_object_list(
    dk_group_t* group, const dk_bytes_t* items, size_t count, int32_t src,
    dk_bytes_t** items_out, size_t* count_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    std::vector<std::string> list;
    if (g->rank() == src) {
      DK_ASSIGN_OR_RETURN(list, ReadItems(items, count, "items"));
    }
    DK_RETURN_IF_ERROR(distkit::dist::BroadcastObjectList(&list, src, g.get()));
    return ReturnItems(list, items_out, count_out);
  });
}

dk_status_t dk_group_collect_results(dk_group_t* group, const dk_bytes_t* part,
                                     size_t part_count, int64_t size,
                                     const char* device, const char* tmpdir,
                                     dk_bytes_t** items_out, size_t* count_out,
                                     dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(CheckOuts(items_out, count_out));
    DK_RETURN_IF_ERROR(NotNull(device, "device"));
    DK_ASSIGN_OR_RETURN(std::vector<std::string> items,
                        ReadItems(part, part_count, "part"));
    ProcessGroup* g = nullptr;
    if (group != nullptr || distkit::dist::IsDistributed()) {
      DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> pg, GroupOf(group));
      g = pg.get();
    }
    std::optional<std::string> dir;
    if (tmpdir != nullptr) dir = tmpdir;
    DK_ASSIGN_OR_RETURN(
        std::optional<std::vector<std::string>> results,
        distkit::dist::CollectResults(items, size, device, dir, g));
    if (!results.has_value()) return absl::OkStatus();
    return ReturnItems(*results, items_out, count_out);
  });
}

// ---- Parallel state ------------------------------------------------------

dk_status_t dk_parallel_state_create(dk_group_t* data_parallel,
                                     dk_group_t* tensor_parallel,
                                     dk_group_t* expert_parallel,
                                     dk_parallel_state_t** out,
                                     dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    *out = new dk_parallel_state{distkit::dist::ParallelState(
        DpgOf(data_parallel), DpgOf(tensor_parallel), DpgOf(expert_parallel))};
    return absl::OkStatus();
  });
}

void dk_parallel_state_destroy(dk_parallel_state_t* state) {
  if (state == nullptr || state->destroyed) return;
  // Releases the groups but keeps the small handle: later calls through it
  // answer -1 / DK_FAILED_PRECONDITION instead of reading freed memory.
  state->rep = distkit::dist::ParallelState();
  state->destroyed = true;
}

int32_t dk_parallel_state_rank(const dk_parallel_state_t* state,
                               int32_t which) {
  const distkit::dist::DistributedProcessGroup* g = Which(state, which);
  return g == nullptr ? -1 : g->Rank();
}

int32_t dk_parallel_state_size(const dk_parallel_state_t* state,
                               int32_t which) {
  const distkit::dist::DistributedProcessGroup* g = Which(state, which);
  return g == nullptr ? -1 : g->WorldSize();
}

dk_status_t dk_parallel_state_describe(const dk_parallel_state_t* state,
                                       char** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(state, "state"));
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    if (state->destroyed) {
      return absl::FailedPreconditionError(
          "parallel_state: the handle was destroyed "
          "(dk_parallel_state_destroy)");
    }
    const std::string text = state->rep.ToString();
    DK_ASSIGN_OR_RETURN(*out, OwnedCopy(text));
    return absl::OkStatus();
  });
}

// ---- Gradient reducer ----------------------------------------------------

void dk_reducer_config_init(dk_reducer_config_t* config) {
  if (config == nullptr) return;
  const distkit::GradReducer::Options d;
  config->struct_size = sizeof(*config);
  config->bucket_cap_mb = d.bucket_cap_mb;
  config->first_bucket_cap_mb = d.first_bucket_cap_mb;
  config->find_unused_parameters = d.find_unused_parameters;
  config->gradient_as_bucket_view = d.gradient_as_bucket_view;
  config->broadcast_buffers = d.broadcast_buffers;
  config->comm_hook = DK_COMM_HOOK_NONE;
}

dk_status_t dk_reducer_create(dk_group_t* group, DLTensor* const* params,
                              size_t num_params, DLTensor* const* buffers,
                              size_t num_buffers,
                              const dk_reducer_config_t* config,
                              dk_reducer_t** out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    if (num_params > 0) DK_RETURN_IF_ERROR(NotNull(params, "params"));
    if (num_buffers > 0) DK_RETURN_IF_ERROR(NotNull(buffers, "buffers"));
    DK_RETURN_IF_ERROR(CheckCount(num_params, sizeof(DLTensor*), "num_params"));
    DK_RETURN_IF_ERROR(
        CheckCount(num_buffers, sizeof(DLTensor*), "num_buffers"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(distkit::GradReducer::Options o,
                        ReadReducerConfig(config));
    std::vector<distkit::GradReducer::Parameter> ps;
    for (size_t i = 0; i < num_params; ++i) {
      const std::string what = absl::StrCat("params[", i, "]");
      DK_ASSIGN_OR_RETURN(TensorRef t, Tensor(params[i], what.c_str()));
      ps.push_back({t, what});
    }
    std::vector<TensorRef> bs;
    for (size_t i = 0; i < num_buffers; ++i) {
      const std::string what = absl::StrCat("buffers[", i, "]");
      DK_ASSIGN_OR_RETURN(TensorRef t, Tensor(buffers[i], what.c_str()));
      bs.push_back(t);
    }
    DK_ASSIGN_OR_RETURN(
        std::unique_ptr<distkit::GradReducer> r,
        distkit::GradReducer::Create(g, std::move(ps), std::move(bs), o));
    *out = new dk_reducer{std::move(r)};
    return absl::OkStatus();
  });
}

void dk_reducer_destroy(dk_reducer_t* reducer) { delete reducer; }

dk_status_t dk_reducer_prepare(dk_reducer_t* reducer, const int32_t* unused,
                               size_t num_unused, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    if (num_unused > 0) DK_RETURN_IF_ERROR(NotNull(unused, "unused"));
    DK_RETURN_IF_ERROR(CheckCount(num_unused, sizeof(int32_t), "num_unused"));
    std::vector<int> u(unused, unused + num_unused);
    return reducer->rep->PrepareForBackward(u);
  });
}

dk_status_t dk_reducer_mark_ready(dk_reducer_t* reducer, int32_t index,
                                  const DLTensor* grad, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    DK_ASSIGN_OR_RETURN(TensorRef t, Tensor(grad, "grad"));
    return reducer->rep->MarkReady(index, t);
  });
}

dk_status_t dk_reducer_finalize(dk_reducer_t* reducer, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    return reducer->rep->Finalize();
  });
}

void dk_reducer_set_require_sync(dk_reducer_t* reducer, int32_t require_sync) {
  if (reducer != nullptr) reducer->rep->set_require_sync(require_sync != 0);
}

dk_status_t dk_reducer_broadcast_buffers(dk_reducer_t* reducer,
                                         dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    return reducer->rep->BroadcastBuffers();
  });
}

dk_status_t dk_reducer_grad_view(dk_reducer_t* reducer, int32_t index,
                                 void** data_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    DK_RETURN_IF_ERROR(NotNull(data_out, "data_out"));
    DK_ASSIGN_OR_RETURN(TensorRef t, reducer->rep->GradView(index));
    *data_out = t.data();
    return absl::OkStatus();
  });
}

int64_t dk_reducer_view_generation(const dk_reducer_t* reducer) {
  return reducer == nullptr ? -1 : reducer->rep->view_generation();
}

dk_status_t dk_reducer_reduced_grad(dk_reducer_t* reducer, int32_t index,
                                    void** data_out, dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(reducer, "reducer"));
    DK_RETURN_IF_ERROR(NotNull(data_out, "data_out"));
    DK_ASSIGN_OR_RETURN(TensorRef t, reducer->rep->ReducedGrad(index));
    *data_out = t.data();
    return absl::OkStatus();
  });
}

int32_t dk_reducer_globally_used(const dk_reducer_t* reducer, int32_t index) {
  return reducer != nullptr && reducer->rep->globally_used(index) ? 1 : 0;
}

int32_t dk_reducer_num_buckets(const dk_reducer_t* reducer) {
  return reducer == nullptr
             ? 0
             : static_cast<int32_t>(reducer->rep->buckets().size());
}

// ---- Devices -------------------------------------------------------------

void dk_get_device(DLDevice* out) {
  if (out == nullptr) return;
  *out = distkit::ToDLPack(distkit::dist::GetDevice());
}

dk_status_t dk_tensor_copy(const DLTensor* src, DLTensor* dst,
                           dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_ASSIGN_OR_RETURN(TensorRef s, Tensor(src, "src"));
    DK_ASSIGN_OR_RETURN(TensorRef d, Tensor(dst, "dst"));
    if (s.dtype() != d.dtype() || s.numel() != d.numel()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor_copy: src is ", distkit::DataTypeName(s.dtype()),
                       " x", s.numel(), " but dst is ",
                       distkit::DataTypeName(d.dtype()), " x", d.numel()));
    }
    return distkit::CopyBytes(d.data(), d.device(), s.data(), s.device(),
                              s.nbytes());
  });
}

// ---- Sharded units ----------------------------------------------------------

void dk_shard_config_init(dk_shard_config_t* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  config->strategy = DK_SHARD_FULL_SHARD;
  config->param_dtype = DK_DTYPE_UNSET;
  config->reduce_dtype = DK_DTYPE_UNSET;
}

dk_status_t dk_shard_create(dk_group_t* group, DLTensor* const* params,
                            size_t num_params, const char* const* names,
                            const dk_shard_config_t* config, dk_shard_t** out,
                            dk_error_t** err) {
  return Guard(err, [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(std::shared_ptr<ProcessGroup> g, GroupOf(group));
    DK_ASSIGN_OR_RETURN(distkit::FlatShard::Options o, ReadShardConfig(config));
    DK_ASSIGN_OR_RETURN(std::vector<TensorRef> ts,
                        Tensors(params, num_params, "params", false));
    std::vector<distkit::FlatShard::Parameter> ps;
    for (size_t i = 0; i < ts.size(); ++i) {
      ps.push_back({ts[i], names != nullptr && names[i] != nullptr
                               ? std::string(names[i])
                               : absl::StrCat("params[", i, "]")});
    }
    DK_ASSIGN_OR_RETURN(std::unique_ptr<distkit::FlatShard> unit,
                        distkit::FlatShard::Create(g, std::move(ps), o));
    *out = new dk_shard{std::move(unit)};
    return absl::OkStatus();
  });
}

void dk_shard_destroy(dk_shard_t* shard) { delete shard; }

dk_status_t dk_shard_unshard_start(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    return s->StartUnshard();
  });
}

dk_status_t dk_shard_unshard_wait(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    return s->WaitUnshard();
  });
}

dk_status_t dk_shard_unshard(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    return s->Unshard();
  });
}

dk_status_t dk_shard_reshard(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    return s->Reshard();
  });
}

dk_status_t dk_shard_full_param(dk_shard_t* shard, int32_t index,
                                void** data_out, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(data_out, "data_out"));
    DK_ASSIGN_OR_RETURN(TensorRef t, s->FullParam(index));
    *data_out = t.data();
    return absl::OkStatus();
  });
}

dk_status_t dk_shard_accumulate_grad(dk_shard_t* shard, int32_t index,
                                     const DLTensor* grad, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(TensorRef g, Tensor(grad, "grad"));
    return s->AccumulateGrad(index, g);
  });
}

dk_status_t dk_shard_full_grad(dk_shard_t* shard, int32_t index,
                               void** data_out, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(data_out, "data_out"));
    DK_ASSIGN_OR_RETURN(TensorRef t, s->FullGrad(index));
    *data_out = t.data();
    return absl::OkStatus();
  });
}

dk_status_t dk_shard_reduce_grads(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    return s->ReduceScatterGrads();
  });
}

dk_status_t dk_shard_reduce_grads_start(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    return s->StartReduceScatterGrads();
  });
}

dk_status_t dk_shard_reduce_grads_wait(dk_shard_t* shard, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    return s->WaitReduceScatterGrads();
  });
}

void dk_shard_set_require_sync(dk_shard_t* shard, int32_t require_sync) {
  if (shard != nullptr && shard->rep != nullptr)
    shard->rep->set_require_sync(require_sync != 0);
}

int32_t dk_shard_num_flat(const dk_shard_t* shard) {
  return shard == nullptr || shard->rep == nullptr ? 0 : shard->rep->num_flat();
}

dk_status_t dk_shard_local(dk_shard_t* shard, int32_t flat, void** data_out,
                           void** grad_out, int64_t* numel_out,
                           dk_dtype_t* dtype_out, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
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
  if (shard != nullptr && shard->rep != nullptr) shard->rep->ZeroShardGrads();
}

dk_status_t dk_shard_piece(dk_shard_t* shard, int32_t index,
                           int64_t* offset_out, int64_t* numel_out,
                           void** data_out, void** grad_out, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
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
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::vector<TensorRef> ts,
                        Tensors(outs, n, "outs", rank0_only != 0));
    return s->GatherFullParams(ts, rank0_only != 0);
  });
}

dk_status_t dk_shard_load_full(dk_shard_t* shard, DLTensor* const* values,
                               size_t n, int32_t rank0_only, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::vector<TensorRef> ts,
                        Tensors(values, n, "values", false));
    return s->LoadFullParams(ts, rank0_only != 0);
  });
}

dk_status_t dk_shard_load_sharded(dk_shard_t* shard, int32_t saved_world_size,
                                  const DLTensor* const* saved,
                                  size_t num_saved, dk_error_t** err) {
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
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
          return Tensor(
              t, absl::StrCat("saved[", flat * saved_world_size + rank, "]")
                     .c_str());
        });
  });
}

int64_t dk_shard_held_bytes(const dk_shard_t* shard) {
  return shard == nullptr || shard->rep == nullptr
             ? 0
             : static_cast<int64_t>(shard->rep->held_bytes());
}

int64_t dk_shard_peak_held_bytes(const dk_shard_t* shard) {
  return shard == nullptr || shard->rep == nullptr
             ? 0
             : static_cast<int64_t>(shard->rep->peak_held_bytes());
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
  return OnShard(shard, err, [&](distkit::FlatShard* s) -> absl::Status {
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
