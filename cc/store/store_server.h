// StoreServer hosts the job's Store over TCP (the wire format in
// internal/wire.h). It binds only the address it is given (never 0.0.0.0
// unless asked), has every connection prove it knows the job token before it
// reads any request (a handshake over fresh nonces that never sends the
// token: internal/handshake.h), and keeps its state in a HashStore. One
// thread serves every connection from an epoll loop: a small request costs
// no thread wake-up of its own, and a blocked Get or Wait holds no thread (it
// is parked until its keys arrive, its timeout passes or its client goes
// away). A connection that has not finished the handshake within
// Options::handshake_timeout is closed; authenticated connections have TCP
// keep-alive, so one whose host vanished is reaped in minutes. One
// connection's input is read in bounded portions per turn of the loop, so a
// flood from one peer cannot starve the others.
//
//   DK_ASSIGN_OR_RETURN(auto server, StoreServer::Start({"127.0.0.1:0",
//   token})); std::string where = server->address();  // "127.0.0.1:41233"

#ifndef DISTKIT_CC_STORE_STORE_SERVER_H_
#define DISTKIT_CC_STORE_STORE_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace distkit {

class HashStore;

class StoreServer {
 public:
  struct Options {
    // "host:port"; port 0 picks a free port (see address()).
    std::string address = "127.0.0.1:0";
    // The job token every connection must prove it knows. Empty accepts
    // only clients whose token is empty as well.
    std::string token;
    // How long a connection may take to finish the handshake before it is
    // closed: a peer that connects and sends nothing (or part of a hello)
    // holds no descriptor for long. A TcpStore finishes it with its first
    // call, so this also bounds how long a client may connect ahead of its
    // first call.
    absl::Duration handshake_timeout = absl::Seconds(10);
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

  // The server's state, for tests and for a rank that hosts the store itself
  // (its changes wake the requests parked on it).
  HashStore& state();

  // How many client connections are open now (for tests and benchmarks).
  int connections() const;

  // What the server has served so far: the counts that grow with a job's
  // size at start-up (tests check they grow linearly). With
  // DISTKIT_STORE_STATS=<file> set, Shutdown appends them to that file.
  struct Served {
    int64_t connections = 0;  // accepted
    int64_t requests = 0;     // answered after the handshake
    // Keys those requests named: a multi_get of every rank's key by every
    // rank is N requests but N^2 keys, all in the server's one thread.
    int64_t keys = 0;
  };
  Served served() const;

  class Loop;

 private:
  StoreServer() = default;

  std::unique_ptr<Loop> loop_;
  bool stats_written_ = false;
  std::string address_;
  int port_ = 0;
};

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_STORE_SERVER_H_
