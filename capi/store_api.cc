// The C ABI, section "Store": the job's key-value store, as a client
// (dk_store_connect), as its server (dk_store_serve) or the default group's.

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "capi/caller_memory.h"
#include "capi/handles.h"
#include "capi/versioned_struct.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/store/request_limits.h"
#include "cc/store/store_server.h"
#include "cc/store/tcp_store.h"
#include "distkit/distkit.h"

namespace distkit {
namespace capi {
namespace {

absl::StatusOr<dk_store_config_t> ReadStoreConfig(
    const dk_store_config_t* config) {
  if (config == nullptr) return absl::InvalidArgumentError("config is NULL");
  DK_ASSIGN_OR_RETURN(
      dk_store_config_t c,
      ReadVersionedStruct(
          config, &dk_store_config_init, "dk_store_config",
          {DK_FIELD_SPAN(dk_store_config_t, address),
           DK_FIELD_SPAN(dk_store_config_t, token),
           DK_FIELD_SPAN(dk_store_config_t, timeout_ms),
           DK_FIELD_SPAN(dk_store_config_t, connect_timeout_ms)}));
  if (c.address == nullptr)
    return absl::InvalidArgumentError("config: address is NULL");
  return c;
}

// A value bound for the store: within the store's request limit.
absl::Status CheckStoreValue(size_t n, const char* what) {
  if (n > MaxStoreRequestBytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", n, " bytes is over the store's request limit of ",
        MaxStoreRequestBytes(), " (DISTKIT_STORE_MAX_REQUEST_BYTES)"));
  }
  return absl::OkStatus();
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

// The keys CheckKeys accepted, copied.
std::vector<std::string> Keys(const char* const* keys, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.emplace_back(keys[i]);
  return out;
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::capi::CheckKeys;
using ::distkit::capi::CheckStoreValue;
using ::distkit::capi::Guard;
using ::distkit::capi::Keys;
using ::distkit::capi::NotNull;
using ::distkit::capi::ReadItems;
using ::distkit::capi::ReadStoreConfig;
using ::distkit::capi::ReturnBytes;
using ::distkit::capi::ReturnItems;

extern "C" {

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

}  // extern "C"
