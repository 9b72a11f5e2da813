// File: store_server.h
//
// StoreServer hosts the job's Store as a gRPC service (store.proto). It binds
// only the address it is given (never 0.0.0.0 unless asked), checks the job
// token on every request before reading its body, and keeps its state in a
// HashStore. A blocked Get or
// Wait whose client goes away is released within ~100 ms.
//
//   DK_ASSIGN_OR_RETURN(auto server, StoreServer::Start({"127.0.0.1:0",
//   token})); std::string where = server->address();  // "127.0.0.1:41233"

#ifndef DISTKIT_CC_STORE_STORE_SERVER_H_
#define DISTKIT_CC_STORE_STORE_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace distkit {

class HashStore;
class StoreServiceImpl;

class StoreServer {
 public:
  struct Options {
    // "host:port"; port 0 picks a free port (see address()).
    std::string address = "127.0.0.1:0";
    // The job token every request must carry. Empty accepts only requests
    // whose token is empty as well.
    std::string token;
  };

  // Binds and starts serving. UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(
      const Options& options);

  // Stops serving; in-flight calls are cancelled. Called by the destructor.
  void Shutdown();
  ~StoreServer();

  // The address clients connect to, with the port actually bound.
  const std::string& address() const { return address_; }
  int port() const { return port_; }

  // The server's state, for tests and for a rank that hosts the store itself.
  HashStore& state();

 private:
  StoreServer() = default;

  std::unique_ptr<StoreServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
};

// Splits "host:port" (or "[v6]:port"). INVALID_ARGUMENT on malformed text.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    const std::string& address);

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_STORE_SERVER_H_
