#include "cc/store/store_server.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cc/store/hash_store.h"
#include "cc/store/internal/grpc_status.h"
#include "cc/store/request_limits.h"
#include "cc/store/store.grpc.pb.h"

namespace distkit {

namespace pb = ::distkit::store;

class StoreServiceImpl final : public pb::StoreService::Service {
 public:
  explicit StoreServiceImpl(std::string token) : token_(std::move(token)) {}

  HashStore& state() { return state_; }

  grpc::Status Set(grpc::ServerContext* ctx, const pb::SetRequest* req,
                   pb::SetResponse*) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    return store_internal::ToGrpcStatus(state_.Set(req->key(), req->value()));
  }

  grpc::Status Add(grpc::ServerContext* ctx, const pb::AddRequest* req,
                   pb::AddResponse* resp) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    absl::StatusOr<int64_t> v = state_.Add(req->key(), req->delta());
    if (v.ok()) resp->set_value(*v);
    return store_internal::ToGrpcStatus(v.status());
  }

  grpc::Status CompareSet(grpc::ServerContext* ctx,
                          const pb::CompareSetRequest* req,
                          pb::CompareSetResponse* resp) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    absl::StatusOr<std::string> v =
        state_.CompareSet(req->key(), req->expected(), req->desired());
    if (v.ok()) resp->set_value(*std::move(v));
    return store_internal::ToGrpcStatus(v.status());
  }

  grpc::Status Wait(grpc::ServerContext* ctx, const pb::WaitRequest* req,
                    pb::WaitResponse*) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    return store_internal::ToGrpcStatus(
        state_.WaitFor(keys, absl::Milliseconds(req->timeout_ms()),
                       [ctx] { return ctx->IsCancelled(); }));
  }

  grpc::Status Check(grpc::ServerContext* ctx, const pb::CheckRequest* req,
                     pb::CheckResponse* resp) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    absl::StatusOr<bool> ready = state_.Check(keys);
    if (ready.ok()) resp->set_ready(*ready);
    return store_internal::ToGrpcStatus(ready.status());
  }

  grpc::Status DeleteKey(grpc::ServerContext* ctx,
                         const pb::DeleteKeyRequest* req,
                         pb::DeleteKeyResponse* resp) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    absl::StatusOr<bool> deleted = state_.DeleteKey(req->key());
    if (deleted.ok()) resp->set_deleted(*deleted);
    return store_internal::ToGrpcStatus(deleted.status());
  }

  grpc::Status NumKeys(grpc::ServerContext* ctx, const pb::NumKeysRequest*,
                       pb::NumKeysResponse* resp) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    absl::StatusOr<int64_t> n = state_.NumKeys();
    if (n.ok()) resp->set_count(*n);
    return store_internal::ToGrpcStatus(n.status());
  }

  grpc::Status MultiGet(grpc::ServerContext* ctx,
                        const pb::MultiGetRequest* req,
                        pb::MultiGetResponse* resp) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    absl::StatusOr<std::vector<std::string>> values =
        state_.MultiGetFor(keys, absl::Milliseconds(req->timeout_ms()),
                           [ctx] { return ctx->IsCancelled(); });
    if (values.ok()) {
      for (std::string& v : *values) resp->add_values(std::move(v));
    }
    return store_internal::ToGrpcStatus(values.status());
  }

  grpc::Status MultiSet(grpc::ServerContext* ctx,
                        const pb::MultiSetRequest* req,
                        pb::MultiSetResponse*) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    std::vector<std::string> values(req->values().begin(), req->values().end());
    return store_internal::ToGrpcStatus(state_.MultiSet(keys, values));
  }

  grpc::Status Append(grpc::ServerContext* ctx, const pb::AppendRequest* req,
                      pb::AppendResponse*) override {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    return store_internal::ToGrpcStatus(
        state_.Append(req->key(), req->value()));
  }

 private:
  grpc::Status Authenticate(grpc::ServerContext* ctx) const {
    const auto& md = ctx->client_metadata();
    auto it = md.find(store_internal::kTokenMetadataKey);
    const bool present = it != md.end();
    const std::string given =
        present ? std::string(it->second.data(), it->second.size()) : "";
    if (present && ConstantTimeEquals(given, token_)) return grpc::Status::OK;
    if (!present && token_.empty()) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        present ? "store: wrong job token"
                                : "store: request carries no job token");
  }

  static bool ConstantTimeEquals(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
    return diff == 0;
  }

  const std::string token_;
  HashStore state_;
};

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' is not host:port"));
  }
  return std::make_pair(address.substr(0, colon), port);
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(
    const Options& options) {
  absl::StatusOr<std::pair<std::string, int>> host_port =
      SplitHostPort(options.address);
  if (!host_port.ok()) return host_port.status();

  std::unique_ptr<StoreServer> server(new StoreServer());
  server->service_ = std::make_unique<StoreServiceImpl>(options.token);
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.RegisterService(server->service_.get());
  // A request over the limit is refused as its length arrives, before its
  // body is buffered (the token is checked after the body; the limit bounds
  // what an unauthenticated request can cost). Headroom covers framing.
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(
      MaxStoreRequestBytes() + (1 << 20), std::numeric_limits<int>::max())));
  builder.SetMaxSendMessageSize(-1);
  // Reuse-port would let two stores share one port silently; refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("store server: cannot listen on ", options.address,
                     " (address in use, or not an address of this host)"));
  }
  server->port_ = bound_port;
  server->address_ = absl::StrCat(host_port->first, ":", bound_port);
  return server;
}

void StoreServer::Shutdown() {
  if (server_ == nullptr) return;
  // Blocked waits notice the cancellation within their poll interval.
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
}

StoreServer::~StoreServer() { Shutdown(); }

HashStore& StoreServer::state() { return service_->state(); }

}  // namespace distkit
