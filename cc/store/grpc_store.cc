#include "cc/store/grpc_store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cc/store/call_deadline.h"
#include "cc/store/internal/grpc_status.h"
#include "cc/store/request_limits.h"
#include "cc/store/store.grpc.pb.h"

namespace distkit {

namespace pb = ::distkit::store;

namespace {

// A blocking call's RPC deadline is its store timeout plus this margin, so the
// server's own DEADLINE_EXCEEDED (which names the keys) arrives first.
constexpr absl::Duration kBlockingCallMargin = absl::Seconds(5);

// The server's wait time for a blocking call: the caller's timeout, cut to
// the thread's store deadline (ScopedStoreDeadline). When the deadline cuts
// it, the server is asked to give up a little before the RPC's own deadline,
// so its answer (which names the missing keys) still arrives.
absl::Duration ServerWaitTime(absl::Duration timeout) {
  const absl::Duration clamped = ClampToStoreDeadline(timeout);
  if (clamped >= timeout) return timeout;
  return clamped * 9 / 10;
}

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return std::chrono::system_clock::from_time_t(0) +
         std::chrono::microseconds(absl::ToUnixMicros(t));
}

}  // namespace

class GrpcStore::Stub {
 public:
  explicit Stub(std::shared_ptr<grpc::Channel> channel)
      : channel(channel), service(pb::StoreService::NewStub(channel)) {}
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::StoreService::Stub> service;
};

absl::StatusOr<std::unique_ptr<GrpcStore>> GrpcStore::Connect(
    const Options& options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError("store: empty server address");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Loopback and cluster addresses must never go through an HTTP proxy that
  // happens to be set in the environment.
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // Reconnect quickly while waiting for a store that is still starting.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options.address, grpc::InsecureChannelCredentials(), args);
  // Cut to the thread's store deadline: init connects under its own bound.
  const absl::Time deadline =
      std::min(absl::Now() + options.connect_timeout, StoreCallDeadline());
  if (!channel->WaitForConnected(ToChrono(deadline))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "store: cannot reach the store server at ", options.address, " within ",
        absl::FormatDuration(options.connect_timeout)));
  }
  std::unique_ptr<GrpcStore> store(new GrpcStore(
      options.address, options.token, std::make_unique<Stub>(channel)));
  store->set_timeout(options.timeout);
  return store;
}

GrpcStore::GrpcStore(std::string address, std::string token,
                     std::unique_ptr<Stub> stub)
    : address_(std::move(address)),
      token_(std::move(token)),
      stub_(std::move(stub)) {}

GrpcStore::~GrpcStore() = default;

// Requests that do not block get the store timeout as their deadline too, so a
// server that stops answering surfaces as an error instead of a hang.
void GrpcStore::Prepare(grpc::ClientContext* ctx, absl::Duration budget) const {
  if (!token_.empty())
    ctx->AddMetadata(store_internal::kTokenMetadataKey, token_);
  ctx->set_deadline(
      ToChrono(std::min(absl::Now() + budget, StoreCallDeadline())));
  // Ride out a brief disconnect instead of failing at once.
  ctx->set_wait_for_ready(true);
}

absl::Status GrpcStore::Convert(absl::string_view op,
                                const grpc::Status& s) const {
  if (s.ok()) return absl::OkStatus();
  const std::string text = s.error_message();  // returned by value
  absl::string_view message = text;
  const bool from_store = absl::ConsumePrefix(&message, "store: ");
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && !from_store) {
    // gRPC's own deadline: the server did not answer in time.
    return absl::DeadlineExceededError(absl::StrCat(
        "store ", address_, ": ", op, ": no answer from the store server (",
        s.error_message(), ")"));
  }
  return absl::Status(
      static_cast<absl::StatusCode>(s.error_code()),
      absl::StrCat("store ", address_, ": ", op, ": ", message));
}

absl::Status GrpcStore::Set(absl::string_view key, absl::string_view value) {
  if (absl::Status bad = CheckStoreRequest("set", {key}, value.size());
      !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout());
  pb::SetRequest req;
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  pb::SetResponse resp;
  grpc::Status s = stub_->service->Set(&ctx, req, &resp);
  return Convert("set", s);
}

absl::StatusOr<int64_t> GrpcStore::Add(absl::string_view key, int64_t delta) {
  if (absl::Status bad = CheckStoreRequest("add", {key}, 0); !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout());
  pb::AddRequest req;
  req.set_key(std::string(key));
  req.set_delta(delta);
  pb::AddResponse resp;
  grpc::Status s = stub_->service->Add(&ctx, req, &resp);
  if (!s.ok()) return Convert("add", s);
  return resp.value();
}

absl::StatusOr<std::string> GrpcStore::CompareSet(absl::string_view key,
                                                  absl::string_view expected,
                                                  absl::string_view desired) {
  if (absl::Status bad = CheckStoreRequest("compare_set", {key},
                                           expected.size() + desired.size());
      !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout());
  pb::CompareSetRequest req;
  req.set_key(std::string(key));
  req.set_expected(std::string(expected));
  req.set_desired(std::string(desired));
  pb::CompareSetResponse resp;
  grpc::Status s = stub_->service->CompareSet(&ctx, req, &resp);
  if (!s.ok()) return Convert("compare_set", s);
  return std::move(*resp.mutable_value());
}

absl::Status GrpcStore::WaitWithTimeout(absl::Span<const std::string> keys,
                                        absl::Duration timeout) {
  if (absl::Status bad = CheckStoreRequest("wait", keys, 0); !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout + kBlockingCallMargin);
  pb::WaitRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_timeout_ms(absl::ToInt64Milliseconds(ServerWaitTime(timeout)));
  pb::WaitResponse resp;
  grpc::Status s = stub_->service->Wait(&ctx, req, &resp);
  return Convert("wait", s);
}

absl::StatusOr<bool> GrpcStore::Check(absl::Span<const std::string> keys) {
  if (absl::Status bad = CheckStoreRequest("check", keys, 0); !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout());
  pb::CheckRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  pb::CheckResponse resp;
  grpc::Status s = stub_->service->Check(&ctx, req, &resp);
  if (!s.ok()) return Convert("check", s);
  return resp.ready();
}

absl::StatusOr<bool> GrpcStore::DeleteKey(absl::string_view key) {
  if (absl::Status bad = CheckStoreRequest("delete_key", {key}, 0); !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout());
  pb::DeleteKeyRequest req;
  req.set_key(std::string(key));
  pb::DeleteKeyResponse resp;
  grpc::Status s = stub_->service->DeleteKey(&ctx, req, &resp);
  if (!s.ok()) return Convert("delete_key", s);
  return resp.deleted();
}

absl::StatusOr<int64_t> GrpcStore::NumKeys() {
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout());
  pb::NumKeysResponse resp;
  grpc::Status s = stub_->service->NumKeys(&ctx, pb::NumKeysRequest(), &resp);
  if (!s.ok()) return Convert("num_keys", s);
  return resp.count();
}

absl::StatusOr<std::vector<std::string>> GrpcStore::MultiGetWithTimeout(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  if (absl::Status bad =
          CheckStoreRequest(keys.size() == 1 ? "get" : "multi_get", keys, 0);
      !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout + kBlockingCallMargin);
  pb::MultiGetRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_timeout_ms(absl::ToInt64Milliseconds(ServerWaitTime(timeout)));
  pb::MultiGetResponse resp;
  grpc::Status s = stub_->service->MultiGet(&ctx, req, &resp);
  if (!s.ok()) return Convert(keys.size() == 1 ? "get" : "multi_get", s);
  std::vector<std::string> values;
  values.reserve(resp.values_size());
  for (std::string& v : *resp.mutable_values()) values.push_back(std::move(v));
  return values;
}

absl::Status GrpcStore::MultiSet(absl::Span<const std::string> keys,
                                 absl::Span<const std::string> values) {
  if (keys.size() != values.size()) {
    return absl::InvalidArgumentError(absl::StrCat("store: multi_set got ",
                                                   keys.size(), " keys and ",
                                                   values.size(), " values"));
  }
  size_t value_bytes = 0;
  for (const std::string& v : values) value_bytes += v.size();
  if (absl::Status bad = CheckStoreRequest("multi_set", keys, value_bytes);
      !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout());
  pb::MultiSetRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  for (const std::string& v : values) req.add_values(v);
  pb::MultiSetResponse resp;
  grpc::Status s = stub_->service->MultiSet(&ctx, req, &resp);
  return Convert("multi_set", s);
}

absl::Status GrpcStore::Append(absl::string_view key, absl::string_view value) {
  if (absl::Status bad = CheckStoreRequest("append", {key}, value.size());
      !bad.ok()) {
    return bad;
  }
  grpc::ClientContext ctx;
  Prepare(&ctx, timeout());
  pb::AppendRequest req;
  req.set_key(std::string(key));
  req.set_value(std::string(value));
  pb::AppendResponse resp;
  grpc::Status s = stub_->service->Append(&ctx, req, &resp);
  return Convert("append", s);
}

}  // namespace distkit
