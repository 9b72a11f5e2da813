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

// Every method is served "streamed unary": the same wire format as unary
// (one request, one response), but gRPC hands the call over with only its
// metadata, and the request body is read by Serve() after the token checks
// out. A request without the right token is refused before its body is
// buffered, so it costs the store host only HTTP/2's flow-control window,
// whatever its size.
class StoreServiceImpl final : public pb::StoreService::StreamedUnaryService {
 public:
  explicit StoreServiceImpl(std::string token) : token_(std::move(token)) {}

  HashStore& state() { return state_; }

  grpc::Status StreamedSet(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::SetRequest, pb::SetResponse>* call)
      override {
    return Serve(ctx, call, [&](const pb::SetRequest& req, pb::SetResponse*) {
      return state_.Set(req.key(), req.value());
    });
  }

  grpc::Status StreamedAdd(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::AddRequest, pb::AddResponse>* call)
      override {
    return Serve(
        ctx, call, [&](const pb::AddRequest& req, pb::AddResponse* resp) {
          absl::StatusOr<int64_t> v = state_.Add(req.key(), req.delta());
          if (v.ok()) resp->set_value(*v);
          return v.status();
        });
  }

  grpc::Status StreamedCompareSet(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::CompareSetRequest, pb::CompareSetResponse>*
          call) override {
    return Serve(
        ctx, call,
        [&](const pb::CompareSetRequest& req, pb::CompareSetResponse* resp) {
          absl::StatusOr<std::string> v =
              state_.CompareSet(req.key(), req.expected(), req.desired());
          if (v.ok()) resp->set_value(*std::move(v));
          return v.status();
        });
  }

  grpc::Status StreamedWait(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::WaitRequest, pb::WaitResponse>* call)
      override {
    return Serve(ctx, call, [&](const pb::WaitRequest& req, pb::WaitResponse*) {
      std::vector<std::string> keys(req.keys().begin(), req.keys().end());
      return state_.WaitFor(keys, absl::Milliseconds(req.timeout_ms()),
                            [ctx] { return ctx->IsCancelled(); });
    });
  }

  grpc::Status StreamedCheck(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::CheckRequest, pb::CheckResponse>* call)
      override {
    return Serve(
        ctx, call, [&](const pb::CheckRequest& req, pb::CheckResponse* resp) {
          std::vector<std::string> keys(req.keys().begin(), req.keys().end());
          absl::StatusOr<bool> ready = state_.Check(keys);
          if (ready.ok()) resp->set_ready(*ready);
          return ready.status();
        });
  }

  grpc::Status StreamedDeleteKey(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::DeleteKeyRequest, pb::DeleteKeyResponse>*
          call) override {
    return Serve(
        ctx, call,
        [&](const pb::DeleteKeyRequest& req, pb::DeleteKeyResponse* resp) {
          absl::StatusOr<bool> deleted = state_.DeleteKey(req.key());
          if (deleted.ok()) resp->set_deleted(*deleted);
          return deleted.status();
        });
  }

  grpc::Status StreamedNumKeys(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::NumKeysRequest, pb::NumKeysResponse>* call)
      override {
    return Serve(ctx, call,
                 [&](const pb::NumKeysRequest&, pb::NumKeysResponse* resp) {
                   absl::StatusOr<int64_t> n = state_.NumKeys();
                   if (n.ok()) resp->set_count(*n);
                   return n.status();
                 });
  }

  grpc::Status StreamedMultiGet(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::MultiGetRequest, pb::MultiGetResponse>*
          call) override {
    return Serve(
        ctx, call,
        [&](const pb::MultiGetRequest& req, pb::MultiGetResponse* resp) {
          std::vector<std::string> keys(req.keys().begin(), req.keys().end());
          absl::StatusOr<std::vector<std::string>> values =
              state_.MultiGetFor(keys, absl::Milliseconds(req.timeout_ms()),
                                 [ctx] { return ctx->IsCancelled(); });
          if (values.ok()) {
            for (std::string& v : *values) resp->add_values(std::move(v));
          }
          return values.status();
        });
  }

  grpc::Status StreamedMultiSet(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::MultiSetRequest, pb::MultiSetResponse>*
          call) override {
    return Serve(
        ctx, call, [&](const pb::MultiSetRequest& req, pb::MultiSetResponse*) {
          std::vector<std::string> keys(req.keys().begin(), req.keys().end());
          std::vector<std::string> values(req.values().begin(),
                                          req.values().end());
          return state_.MultiSet(keys, values);
        });
  }

  grpc::Status StreamedAppend(
      grpc::ServerContext* ctx,
      grpc::ServerUnaryStreamer<pb::AppendRequest, pb::AppendResponse>* call)
      override {
    return Serve(ctx, call,
                 [&](const pb::AppendRequest& req, pb::AppendResponse*) {
                   return state_.Append(req.key(), req.value());
                 });
  }

 private:
  // Token first, from the metadata; only then the body, then `handle`, and
  // on success the one response a unary call owes.
  template <typename Request, typename Response, typename Handle>
  grpc::Status Serve(grpc::ServerContext* ctx,
                     grpc::ServerUnaryStreamer<Request, Response>* call,
                     Handle handle) const {
    if (grpc::Status s = Authenticate(ctx); !s.ok()) return s;
    Request request;
    if (!call->Read(&request)) {
      return grpc::Status(grpc::StatusCode::CANCELLED,
                          "store: the request's body never arrived");
    }
    Response response;
    grpc::Status s = store_internal::ToGrpcStatus(handle(request, &response));
    if (s.ok()) call->Write(response);
    return s;
  }

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
  // body is buffered; the token is checked before any body is read (Serve),
  // so the limit only bounds what an authenticated request can cost.
  // Headroom covers framing.
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
