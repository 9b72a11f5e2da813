// TcpStore is a Store client of a StoreServer, used by every rank of a job.
// Connect waits for the server to come up (ranks often start before the rank
// that hosts the store), up to connect_timeout. Every connection opens with
// the handshake of internal/handshake.h, finished with its first call (one
// round trip more, then none): the server proves it knows the job token,
// then the client does, and the token itself never crosses the network; a
// wrong token is UNAUTHENTICATED at that call. A connection whose first
// call comes after the server's handshake timeout has closed it is replaced
// by that call. Every call is bounded: by the
// store timeout (blocking calls: a little past it, so the server's answer
// naming the keys arrives first) and by the thread's ScopedStoreDeadline, so
// a server that vanishes or freezes cannot hang a rank.
//
// Calls go, in order, over one connection, so a client sees its own writes.
// A call waiting for another thread's call on that connection fails with
// DEADLINE_EXCEEDED when its own deadline passes first. A connection found
// closed before a call was sent is replaced, retrying with a backoff (10 ms
// doubling to 200 ms) within the call's deadline.
// Set does not wait for an answer (as c10d's TCPStore's does not): it returns
// once its request is written, and a refusal, which the client's own checks
// (request_limits.h) make rare, fails the connection's next call. A blocking
// Get / Wait / MultiGet whose keys are not there yet moves to a connection of
// its own, so one thread's wait never stalls another thread's calls (the job
// watch's heartbeat, a diagnosis). Its first look goes over the ordered
// connection; when that took long (its turn behind another thread's call
// included), the time counts against the wait's timeout.
//
//   DK_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store,
//                       TcpStore::Connect({.address = "127.0.0.1:29500",
//                                          .token = token}));

#ifndef DISTKIT_CC_STORE_TCP_STORE_H_
#define DISTKIT_CC_STORE_TCP_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cc/store/store.h"

namespace distkit {

namespace store_wire {
struct Request;
}  // namespace store_wire

class TcpStore : public Store {
 public:
  struct Options {
    std::string address;  // "host:port" of the StoreServer.
    std::string token;    // The job token.
    absl::Duration timeout = Store::kDefaultTimeout;
    absl::Duration connect_timeout = Store::kDefaultTimeout;
  };

  // Connects, waiting up to connect_timeout for the server to accept.
  // DEADLINE_EXCEEDED names the address when it never does.
  static absl::StatusOr<std::unique_ptr<TcpStore>> Connect(
      const Options& options);

  ~TcpStore() override;

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
  std::string ServerAddress() const override { return address_; }

 private:
  class Connection;
  TcpStore(std::string address, std::string token,
           std::unique_ptr<Connection> first);

  // Sends `request` on the ordered connection and returns the answer's
  // payload (empty for a set, which has none). `op` names the call in errors.
  // `not_ready` (try_only requests) says the server answered "not yet".
  absl::StatusOr<std::string> Call(absl::string_view op,
                                   const store_wire::Request& request,
                                   absl::Duration budget,
                                   bool* not_ready = nullptr);
  // The same for a request already framed.
  absl::StatusOr<std::string> CallFramed(absl::string_view op,
                                         absl::string_view frame, bool answered,
                                         absl::Duration budget,
                                         bool* not_ready);
  // Get / Wait / MultiGet: at once when the keys are there, else parked on a
  // connection of its own.
  absl::StatusOr<std::string> BlockingCall(absl::string_view op,
                                           store_wire::Request request,
                                           absl::Duration timeout);
  // A connection for a parked wait: an idle one, or a new one.
  absl::StatusOr<std::unique_ptr<Connection>> TakeSpare(absl::Time deadline);
  void ReturnSpare(std::unique_ptr<Connection> c);
  // A connection error as the caller sees it: names the server and the op.
  absl::Status Explain(absl::string_view op, const absl::Status& s) const;

  const std::string address_;
  const std::string token_;
  // One call at a time on `ordered_`: a call takes its turn (busy_) before
  // its deadline or fails, rather than holding mu_ across its round trip,
  // so a thread's wait for another's call is bounded by its own deadline.
  absl::Status TakeTurn(absl::Time deadline);
  void EndTurn();
  absl::Mutex mu_;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  // Used only by the thread whose turn it is.
  std::unique_ptr<Connection> ordered_;
  absl::Mutex spare_mu_;
  std::vector<std::unique_ptr<Connection>> spare_ ABSL_GUARDED_BY(spare_mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_TCP_STORE_H_
