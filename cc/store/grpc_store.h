// File: grpc_store.h
//
// GrpcStore is a Store client of a StoreServer, used by every rank of a job.
// Each request carries the job token. Connect waits for the server to come up
// (ranks often start before the rank that hosts the store), up to
// connect_timeout. Blocking calls get a gRPC deadline a little past their
// store timeout, so a server that vanishes cannot hang a rank.
//
//   DK_ASSIGN_OR_RETURN(std::unique_ptr<GrpcStore> store,
//                       GrpcStore::Connect({.address = "127.0.0.1:29500",
//                                           .token = token}));

#ifndef DISTKIT_CC_STORE_GRPC_STORE_H_
#define DISTKIT_CC_STORE_GRPC_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/store/store.h"

namespace grpc {
class ClientContext;
class Status;
}  // namespace grpc

namespace distkit {

class GrpcStore : public Store {
 public:
  struct Options {
    std::string address;  // "host:port" of the StoreServer.
    std::string token;    // The job token.
    absl::Duration timeout = Store::kDefaultTimeout;
    absl::Duration connect_timeout = Store::kDefaultTimeout;
  };

  // Connects, waiting up to connect_timeout for the server to accept.
  // DEADLINE_EXCEEDED names the address when it never does.
  static absl::StatusOr<std::unique_ptr<GrpcStore>> Connect(
      const Options& options);

  ~GrpcStore() override;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status WaitWithTimeout(absl::Span<const std::string> keys,
                               absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  absl::StatusOr<std::vector<std::string>> MultiGetWithTimeout(
      absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override;
  absl::Status Append(absl::string_view key, absl::string_view value) override;

  const std::string& address() const { return address_; }

 private:
  class Stub;
  GrpcStore(std::string address, std::string token, std::unique_ptr<Stub> stub);

  // Prepares a call context: token metadata, deadline `budget` from now.
  void Prepare(grpc::ClientContext* ctx, absl::Duration budget) const;
  // Turns a failed RPC into a Status that names the server and the op.
  absl::Status Convert(absl::string_view op, const grpc::Status& status) const;

  std::string address_;
  std::string token_;
  std::unique_ptr<Stub> stub_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_GRPC_STORE_H_
