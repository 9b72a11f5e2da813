// The TCP plumbing under TcpStore and StoreServer: address resolution, a
// connect and blocking reads / writes bounded by a deadline (poll), so no
// store call can wait past the deadline it was given.

#ifndef DISTKIT_CC_STORE_INTERNAL_SOCKET_H_
#define DISTKIT_CC_STORE_INTERNAL_SOCKET_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace distkit {
namespace store_socket {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

// Splits "host:port" or "[v6]:port". INVALID_ARGUMENT on malformed text.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    absl::string_view address);

// A listening socket bound to exactly `host:port` (port 0: any free port),
// non-blocking, close-on-exec, without SO_REUSEPORT (two stores must never
// share a port). Returns the socket and the port bound. `host` is looked up
// without a bound (StoreServer::Start has none to give).
absl::StatusOr<std::pair<Fd, int>> Listen(const std::string& host, int port);

// Connects to `address` ("host:port"), retrying while nothing listens there
// yet, until `deadline`. The socket is non-blocking with TCP_NODELAY.
// DEADLINE_EXCEEDED when the deadline passes first, a host name's lookup
// included (it runs on a helper thread the caller stops waiting for).
absl::StatusOr<Fd> ConnectBefore(const std::string& address,
                                 absl::Time deadline);

// Writes all of `data` before `deadline`. UNAVAILABLE when the peer has
// gone, DEADLINE_EXCEEDED when it does not take the bytes in time.
absl::Status WriteAll(int fd, absl::string_view data, absl::Time deadline);

// Reads one frame (wire.h) before `deadline` and returns its body.
// UNAVAILABLE when the peer closes, DEADLINE_EXCEEDED on time-out,
// OUT_OF_RANGE (reading and allocating nothing more) when the header
// announces more than `max_bytes`: a peer not yet proven to speak the
// protocol (an HTTP server's "HTTP" reads as 1.2 GB) must not size a buffer,
// nor may a broken or hostile server's answer. `length`, when given, gets
// the length the header announced.
absl::StatusOr<std::string> ReadFrame(int fd, absl::Time deadline,
                                      size_t max_bytes = SIZE_MAX,
                                      size_t* length = nullptr);

// Whether the peer has closed the connection or sent something unasked
// (which, on an idle store connection, is a refusal followed by a close).
// Does not block.
bool HasPendingInputOrClosed(int fd);

}  // namespace store_socket
}  // namespace distkit

#endif  // DISTKIT_CC_STORE_INTERNAL_SOCKET_H_
