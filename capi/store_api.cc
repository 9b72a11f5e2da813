// The C ABI, section "Store": the job's key-value store, as a client
// (dk_store_connect), as its server (dk_store_serve) or the default group's.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "capi/entry_point.h"
#include "cc/core/status.h"
#include "cc/dist_api/dist.h"
#include "cc/store/request_limits.h"
#include "cc/store/store_server.h"
#include "cc/store/tcp_store.h"
#include "distkit/distkit.h"

namespace distkit {
namespace capi {
namespace {

void StoreConfigDefaults(dk_store_config_t* config) {
  config->timeout_ms = 300000;
  config->connect_timeout_ms = 300000;
}

absl::StatusOr<dk_store_config_t> ReadStoreConfig(
    const dk_store_config_t* config) {
  if (config == nullptr) return absl::InvalidArgumentError("config is NULL");
  DK_ASSIGN_OR_RETURN(
      dk_store_config_t c,
      ReadVersionedStruct(
          config, &StoreConfigDefaults, "dk_store_config",
          {DK_FIELD_SPAN(dk_store_config_t, address),
           DK_FIELD_SPAN(dk_store_config_t, token),
           DK_FIELD_SPAN(dk_store_config_t, timeout_ms),
           DK_FIELD_SPAN(dk_store_config_t, connect_timeout_ms)}));
  if (c.address == nullptr)
    return absl::InvalidArgumentError("config: address is NULL");
  // 0 or less: the default (a deadline of "now" would fail every call,
  // the handshake included).
  const dk_store_config_t defaults =
      DefaultVersionedStruct(&StoreConfigDefaults);
  if (c.timeout_ms <= 0) c.timeout_ms = defaults.timeout_ms;
  if (c.connect_timeout_ms <= 0)
    c.connect_timeout_ms = defaults.connect_timeout_ms;
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

// The caller's `n` keys, checked and copied.
absl::StatusOr<std::vector<std::string>> KeyList(const char* const* keys,
                                                 size_t n) {
  DK_RETURN_IF_ERROR(CheckCount(n, sizeof(char*), "num_keys"));
  if (n > 0 && keys == nullptr)
    return absl::InvalidArgumentError("keys is NULL");
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("keys[", i, "] is NULL"));
    out.emplace_back(keys[i]);
  }
  return out;
}

// The handle of dk_store_connect and dk_store_serve: a client of the store
// at the config's address, or, when `serve`, of a server started there.
absl::StatusOr<dk_store*> OpenStore(const dk_store_config_t* config,
                                    bool serve) {
  DK_ASSIGN_OR_RETURN(dk_store_config_t c, ReadStoreConfig(config));
  const std::string token = c.token ? c.token : "";
  std::unique_ptr<StoreServer> server;
  std::string address = c.address;
  if (serve) {
    DK_ASSIGN_OR_RETURN(server, StoreServer::Start({c.address, token}));
    address = server->address();
  }
  DK_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStore> store,
      TcpStore::Connect({address, token, absl::Milliseconds(c.timeout_ms),
                         absl::Milliseconds(c.connect_timeout_ms)}));
  return new dk_store{std::move(store), std::move(server), address};
}

// Guard for a call on a store: `body` gets the Store behind `store`.
template <typename F>
dk_status_t OnStore(dk_store_t* store, dk_error_t** err, F&& body) {
  return OnHandle(store, "store", err,
                  [&](dk_store& s) { return body(*s.rep); });
}

// The same for a call on one key ("key is NULL" after the store).
template <typename F>
dk_status_t OnStore(dk_store_t* store, const char* key, dk_error_t** err,
                    F&& body) {
  return OnStore(store, err, [&](Store& s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(key, "key"));
    return body(s);
  });
}

// A value the caller passes to be stored: `size` bytes at `value` (NULL
// only when empty; `name` in that error), within the request limit (`what`
// names the size).
absl::StatusOr<absl::string_view> StoreValue(const void* value, size_t size,
                                             const char* name,
                                             const char* what) {
  if (size > 0) DK_RETURN_IF_ERROR(NotNull(value, name));
  DK_RETURN_IF_ERROR(CheckStoreValue(size, what));
  return absl::string_view(static_cast<const char*>(value), size);
}

}  // namespace
}  // namespace capi
}  // namespace distkit

using ::distkit::Store;
using ::distkit::capi::KeyList;
using ::distkit::capi::OnStore;
using ::distkit::capi::OpenStore;
using ::distkit::capi::StoreConfigDefaults;
using ::distkit::capi::StoreValue;

extern "C" {

void dk_store_config_init(dk_store_config_t* config) {
  InitVersionedStruct(config,
                      DK_SIZE_THROUGH(dk_store_config_t, connect_timeout_ms),
                      &StoreConfigDefaults);
}

void dk_store_config_init_sized(dk_store_config_t* config, size_t size) {
  InitVersionedStruct(config, size, &StoreConfigDefaults);
}

dk_status_t dk_store_connect(const dk_store_config_t* config, dk_store_t** out,
                             dk_error_t** err) {
  return NewHandle(out, err, [&] { return OpenStore(config, false); });
}

dk_status_t dk_store_serve(const dk_store_config_t* config, dk_store_t** out,
                           dk_error_t** err) {
  return NewHandle(out, err, [&] { return OpenStore(config, true); });
}

dk_status_t dk_default_store(dk_store_t** out, dk_error_t** err) {
  return NewHandle(out, err, []() -> absl::StatusOr<dk_store*> {
    std::shared_ptr<Store> store = distkit::dist::GetStore();
    if (store == nullptr) {
      return absl::FailedPreconditionError("default_store: not distributed");
    }
    // "host:port" of the job's store server, as dk_store_address promises
    // (empty only for a store without a server, an in-process one).
    std::string address = store->ServerAddress();
    return new dk_store{std::move(store), nullptr, std::move(address)};
  });
}

const char* dk_store_address(const dk_store_t* store) {
  return store == nullptr ? nullptr : store->address.c_str();
}

void dk_store_destroy(dk_store_t* store) { delete store; }

dk_status_t dk_store_set(dk_store_t* store, const char* key, const void* value,
                         size_t size, dk_error_t** err) {
  return OnStore(store, key, err, [&](Store& s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(absl::string_view v,
                        StoreValue(value, size, "value", "set: size"));
    return s.Set(key, v);
  });
}

dk_status_t dk_store_get(dk_store_t* store, const char* key, void** value_out,
                         size_t* size_out, dk_error_t** err) {
  return OnStore(store, key, err, [&](Store& s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(value_out, "value_out"));
    DK_RETURN_IF_ERROR(NotNull(size_out, "size_out"));
    DK_ASSIGN_OR_RETURN(std::string value, s.Get(key));
    return ReturnBytes(value, value_out, size_out);
  });
}

dk_status_t dk_store_add(dk_store_t* store, const char* key, int64_t delta,
                         int64_t* out, dk_error_t** err) {
  return OnStore(store, key, err, [&](Store& s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(int64_t value, s.Add(key, delta));
    if (out != nullptr) *out = value;
    return absl::OkStatus();
  });
}

dk_status_t dk_store_wait(dk_store_t* store, const char* const* keys,
                          size_t num_keys, int64_t timeout_ms,
                          dk_error_t** err) {
  return OnStore(store, err, [&](Store& s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::vector<std::string> k, KeyList(keys, num_keys));
    return s.Wait(
        k, timeout_ms < 0 ? s.timeout() : absl::Milliseconds(timeout_ms));
  });
}

dk_status_t dk_store_check(dk_store_t* store, const char* const* keys,
                           size_t num_keys, int32_t* out, dk_error_t** err) {
  return OnStore(store, err, [&](Store& s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(std::vector<std::string> k, KeyList(keys, num_keys));
    DK_ASSIGN_OR_RETURN(bool ready, s.Check(k));
    *out = ready ? 1 : 0;
    return absl::OkStatus();
  });
}

dk_status_t dk_store_delete_key(dk_store_t* store, const char* key,
                                int32_t* out, dk_error_t** err) {
  return OnStore(store, key, err, [&](Store& s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(bool deleted, s.DeleteKey(key));
    if (out != nullptr) *out = deleted ? 1 : 0;
    return absl::OkStatus();
  });
}

dk_status_t dk_store_compare_set(dk_store_t* store, const char* key,
                                 const void* expected, size_t expected_size,
                                 const void* desired, size_t desired_size,
                                 void** value_out, size_t* size_out,
                                 dk_error_t** err) {
  return OnStore(store, key, err, [&](Store& s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(value_out, "value_out"));
    DK_RETURN_IF_ERROR(NotNull(size_out, "size_out"));
    // Both NULL values are reported before either size.
    if (expected_size > 0) DK_RETURN_IF_ERROR(NotNull(expected, "expected"));
    if (desired_size > 0) DK_RETURN_IF_ERROR(NotNull(desired, "desired"));
    DK_ASSIGN_OR_RETURN(absl::string_view e,
                        StoreValue(expected, expected_size, "expected",
                                   "compare_set: expected_size"));
    DK_ASSIGN_OR_RETURN(absl::string_view d,
                        StoreValue(desired, desired_size, "desired",
                                   "compare_set: desired_size"));
    DK_ASSIGN_OR_RETURN(std::string value, s.CompareSet(key, e, d));
    return ReturnBytes(value, value_out, size_out);
  });
}

dk_status_t dk_store_append(dk_store_t* store, const char* key,
                            const void* value, size_t size, dk_error_t** err) {
  return OnStore(store, key, err, [&](Store& s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(absl::string_view v,
                        StoreValue(value, size, "value", "append: size"));
    return s.Append(key, v);
  });
}

dk_status_t dk_store_multi_set(dk_store_t* store, const char* const* keys,
                               const dk_bytes_t* values, size_t num_keys,
                               dk_error_t** err) {
  return OnStore(store, err, [&](Store& s) -> absl::Status {
    DK_ASSIGN_OR_RETURN(std::vector<std::string> k, KeyList(keys, num_keys));
    DK_ASSIGN_OR_RETURN(std::vector<std::string> vals,
                        ReadItems(values, num_keys, "values"));
    return s.MultiSet(k, vals);
  });
}

dk_status_t dk_store_multi_get(dk_store_t* store, const char* const* keys,
                               size_t num_keys, dk_bytes_t** values_out,
                               dk_error_t** err) {
  return OnStore(store, err, [&](Store& s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(values_out, "values_out"));
    DK_ASSIGN_OR_RETURN(std::vector<std::string> k, KeyList(keys, num_keys));
    DK_ASSIGN_OR_RETURN(std::vector<std::string> values, s.MultiGet(k));
    size_t count = 0;
    return ReturnItems(values, values_out, &count);
  });
}

dk_status_t dk_store_num_keys(dk_store_t* store, int64_t* out,
                              dk_error_t** err) {
  return OnStore(store, err, [&](Store& s) -> absl::Status {
    DK_RETURN_IF_ERROR(NotNull(out, "out"));
    DK_ASSIGN_OR_RETURN(*out, s.NumKeys());
    return absl::OkStatus();
  });
}

}  // extern "C"
