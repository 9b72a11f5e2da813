#include "cc/store/tcp_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cc/store/call_deadline.h"
#include "cc/store/internal/handshake.h"
#include "cc/store/internal/socket.h"
#include "cc/store/internal/wire.h"
#include "cc/store/request_limits.h"

namespace distkit {

namespace wire = store_wire;
using store_socket::Fd;

namespace {

// A blocking call's own deadline is its store timeout plus this margin, so the
// server's DEADLINE_EXCEEDED (which names the keys) arrives first.
constexpr absl::Duration kBlockingCallMargin = absl::Seconds(5);
// A blocking call whose first request (the poll on the ordered connection)
// took this long waits only for the rest of its timeout (and says so when
// that wait times out).
constexpr absl::Duration kLongPoll = absl::Milliseconds(100);
// How long a blocked call's connection is kept for the next one.
constexpr size_t kMaxSpareConnections = 4;

// The server's wait time for a blocking call, in the wire's whole
// milliseconds: the caller's timeout, cut to the thread's store deadline
// (ScopedStoreDeadline). The caller's own positive timeout under a
// millisecond is 1, never 0 (which the server takes as "no time left": it
// answers DEADLINE_EXCEEDED at once), as the bindings round their timeouts.
// When the deadline cuts it, the server is asked to give up a little before
// the call's own deadline, so its answer (which names the missing keys)
// still arrives: 9/10 of what is left, rounded down (0 under ~1 ms: an
// answer at once, rather than one that would come after the deadline).
int64_t ServerWaitMillis(absl::Duration timeout) {
  const absl::Duration clamped = ClampToStoreDeadline(timeout);
  if (clamped >= timeout) {
    if (timeout <= absl::ZeroDuration()) return 0;
    return std::max<int64_t>(absl::ToInt64Milliseconds(timeout), 1);
  }
  return std::max<int64_t>(absl::ToInt64Milliseconds(clamped * 9 / 10), 0);
}

absl::Time CallDeadline(absl::Duration budget) {
  return std::min(absl::Now() + budget, StoreCallDeadline());
}

// What a connection says about a request: the server's answer, or that the
// connection failed (`transport`), and whether the request had been sent
// when it did (a call not sent can be retried on a new connection).
struct Answer {
  absl::Status transport;
  bool sent = false;
  uint8_t code = 0;
  std::string payload;  // the answer's payload, or the server's message
};

}  // namespace

class TcpStore::Connection {
 public:
  // Connects and sends the hello (the handshake's first message,
  // internal/handshake.h); the rest of the handshake happens with the first
  // call, so a connection costs no wait until it is used.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(
      const std::string& address, const std::string& token,
      absl::Time deadline) {
    absl::StatusOr<Fd> fd = store_socket::ConnectBefore(address, deadline);
    if (!fd.ok()) return fd.status();
    std::unique_ptr<Connection> c(new Connection(*std::move(fd), token));
    wire::Request hello;
    hello.op = wire::Op::kHello;
    hello.magic = wire::kMagic;
    hello.values.push_back(c->client_nonce_);
    std::string frame;
    wire::EncodeRequest(hello, &frame);
    if (absl::Status s = store_socket::WriteAll(c->fd_.get(), frame, deadline);
        !s.ok()) {
      return s;
    }
    return c;
  }

  bool broken() const { return broken_; }

  // Sends `frame` and, when `answered`, reads its answer.
  Answer Exchange(absl::string_view frame, bool answered, absl::Time deadline) {
    Answer a;
    if (broken_) {
      a.transport = absl::UnavailableError("connection closed");
      return a;
    }
    // On an idle, authenticated connection the server sends nothing unasked
    // except a refusal of an earlier set, and then closes.
    if (!hello_pending_ && store_socket::HasPendingInputOrClosed(fd_.get())) {
      ReadAnswer(&a, absl::Now() + absl::Milliseconds(100));
      broken_ = true;
      if (a.transport.ok() && a.code == 0) {
        a.code = static_cast<uint8_t>(absl::StatusCode::kInternal);
        a.payload = "store: an answer nobody asked for";
      }
      return a;
    }
    std::string proof_and_frame;
    if (hello_pending_) {
      // The server's challenge: its proof first; ours only if it holds.
      if (!AcceptChallenge(&a, deadline)) {
        broken_ = true;
        return a;
      }
      wire::Request proof;
      proof.op = wire::Op::kProof;
      proof.values.push_back(
          store_auth::ClientProof(token_, server_nonce_, client_nonce_));
      wire::EncodeRequest(proof, &proof_and_frame);
      proof_and_frame.append(frame.data(), frame.size());
      frame = proof_and_frame;
      // The server closes a connection whose handshake is not finished in
      // time (StoreServer::Options::handshake_timeout): a connection opened
      // long before its first call is found closed here, before anything is
      // sent, so the call moves to a new one.
      if (store_socket::HasPendingInputOrClosed(fd_.get())) {
        a.transport = absl::UnavailableError(
            "the store server closed the connection before the handshake "
            "ended");
        broken_ = true;
        return a;
      }
    }
    a.transport = store_socket::WriteAll(fd_.get(), frame, deadline);
    a.sent = true;
    if (!a.transport.ok()) {
      broken_ = true;
      return a;
    }
    if (hello_pending_) {
      ReadAnswer(&a, deadline);
      if (!a.transport.ok() || a.code != 0) {
        broken_ = true;  // a refused proof: the server closes
        // (Not retried: the server may have applied the request sent with
        // the proof before the connection failed; an add twice is worse
        // than an error.)
        return a;
      }
      hello_pending_ = false;
      a.payload.clear();
    }
    if (answered) ReadAnswer(&a, deadline);
    // No answer in time leaves the stream out of step: start afresh.
    if (!a.transport.ok()) broken_ = true;
    return a;
  }

 private:
  Connection(Fd fd, const std::string& token)
      : fd_(std::move(fd)),
        token_(token),
        client_nonce_(store_auth::NewNonce()) {}

  // Reads the answer to the hello and checks the server's proof. false
  // with `a` saying why when the connection cannot go on (nothing was sent
  // for the call: a transport error lets the caller retry).
  bool AcceptChallenge(Answer* a, absl::Time deadline) {
    // Capped as the server caps the hello: until the peer proves itself,
    // its first bytes size no buffer (an HTTP server's "HTTP/1.1" would ask
    // for 1.2 GB).
    ReadAnswer(a, deadline, wire::kMaxHelloBytes);
    if (a->transport.code() == absl::StatusCode::kOutOfRange) {
      // Not a transport failure to retry: whatever answers there is no store.
      a->code = static_cast<uint8_t>(absl::StatusCode::kUnauthenticated);
      a->payload = absl::StrCat(
          "store: the server's first answer is no challenge (",
          a->transport.message(),
          "): not a distkit store? (another service answers at this "
          "address)");
      a->transport = absl::OkStatus();
      return false;
    }
    if (!a->transport.ok() || a->code != 0) return false;
    wire::Reader r(a->payload);
    const uint32_t magic = r.U32();
    server_nonce_ = r.String();
    const std::string server_proof = r.String();
    a->payload.clear();
    if (!r.done() || magic != wire::kMagic ||
        server_nonce_.size() != store_auth::kNonceBytes) {
      a->code = static_cast<uint8_t>(absl::StatusCode::kUnauthenticated);
      a->payload =
          "store: the server's challenge is malformed (another protocol "
          "version, or not a distkit store)";
      return false;
    }
    if (!store_auth::ConstantTimeEquals(
            server_proof,
            store_auth::ServerProof(token_, server_nonce_, client_nonce_))) {
      a->code = static_cast<uint8_t>(absl::StatusCode::kUnauthenticated);
      a->payload =
          token_.empty()
              ? "store: request carries no job token (the store server "
                "requires one: set DISTKIT_TOKEN)"
              : "store: wrong job token (the store server proved another "
                "one: its DISTKIT_TOKEN and this process's differ, or "
                "another job's store answers at this address)";
      return false;
    }
    return true;
  }

  // Reads the next answer, capped as the server caps what it sends (a broken
  // or hostile server cannot make this process allocate without bound). An
  // answer over the cap is RESOURCE_EXHAUSTED naming its size, and, its body
  // left unread, ends the connection. `max_bytes` other than 0: that cap,
  // with OUT_OF_RANGE in `transport` when a frame passes it.
  void ReadAnswer(Answer* a, absl::Time deadline, size_t max_bytes = 0) {
    const size_t cap = max_bytes != 0 ? max_bytes : MaxStoreFrameBytes();
    size_t announced = 0;
    absl::StatusOr<std::string> body =
        store_socket::ReadFrame(fd_.get(), deadline, cap, &announced);
    if (!body.ok()) {
      a->transport = body.status();
      if (max_bytes == 0 &&
          a->transport.code() == absl::StatusCode::kOutOfRange) {
        broken_ = true;
        a->transport = absl::OkStatus();
        a->code = static_cast<uint8_t>(absl::StatusCode::kResourceExhausted);
        a->payload = absl::StrCat(
            "store: the server's answer of ", announced,
            " bytes is over this client's limit of ", cap,
            " for a frame (DISTKIT_STORE_MAX_REQUEST_BYTES plus framing); "
            "not read, and the connection is dropped");
      }
      return;
    }
    if (body->empty()) {
      a->transport = absl::DataLossError("an empty answer");
      return;
    }
    a->code = static_cast<uint8_t>((*body)[0]);
    if (a->code == 0 || a->code == wire::kNotReadyCode) {
      a->payload = body->substr(1);
      return;
    }
    wire::Reader r(absl::string_view(*body).substr(1));
    a->payload = r.String();
    if (!r.ok()) a->transport = absl::DataLossError("a malformed answer");
  }

  Fd fd_;
  const std::string token_;
  const std::string client_nonce_;
  std::string server_nonce_;
  bool hello_pending_ = true;  // the handshake is not finished
  bool broken_ = false;
};

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(
    const Options& options) {
  if (options.address.empty()) {
    return absl::InvalidArgumentError("store: empty server address");
  }
  // Cut to the thread's store deadline: init connects under its own bound,
  // which is then the one an error names (not connect_timeout's default).
  const absl::Time start = absl::Now();
  const absl::Time deadline = CallDeadline(options.connect_timeout);
  absl::StatusOr<std::unique_ptr<Connection>> first =
      Connection::Open(options.address, options.token, deadline);
  if (!first.ok()) {
    if (first.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::InvalidArgumentError(
          absl::StrCat("store: ", first.status().message()));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        "store: cannot reach the store server at ", options.address, " within ",
        absl::FormatDuration(
            absl::Trunc(deadline - start, absl::Milliseconds(1))),
        " (", first.status().message(), ")"));
  }
  std::unique_ptr<TcpStore> store(
      new TcpStore(options.address, options.token, *std::move(first)));
  store->set_timeout(options.timeout);
  return store;
}

TcpStore::TcpStore(std::string address, std::string token,
                   std::unique_ptr<Connection> first)
    : address_(std::move(address)),
      token_(std::move(token)),
      ordered_(std::move(first)) {}

TcpStore::~TcpStore() = default;

absl::Status TcpStore::Explain(absl::string_view op,
                               const absl::Status& s) const {
  absl::string_view message = s.message();
  (void)absl::ConsumePrefix(&message, "store: ");
  return absl::Status(
      s.code(), absl::StrCat("store ", address_, ": ", op, ": ", message));
}

namespace {

// The caller's status for a connection's answer.
absl::Status AnswerStatus(const Answer& a) {
  if (!a.transport.ok()) {
    if (a.transport.code() == absl::StatusCode::kDeadlineExceeded) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no answer from the store server (", a.transport.message(), ")"));
    }
    return absl::UnavailableError(
        absl::StrCat("the connection to the store server failed (",
                     a.transport.message(), ")"));
  }
  if (a.code == 0 || a.code == wire::kNotReadyCode) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(a.code), a.payload);
}

}  // namespace

absl::StatusOr<std::string> TcpStore::Call(absl::string_view op,
                                           const wire::Request& request,
                                           absl::Duration budget,
                                           bool* not_ready) {
  std::string frame;
  wire::EncodeRequest(request, &frame);
  return CallFramed(op, frame, request.op != wire::Op::kSet, budget, not_ready);
}

absl::StatusOr<std::string> TcpStore::CallFramed(absl::string_view op,
                                                 absl::string_view frame,
                                                 bool answered,
                                                 absl::Duration budget,
                                                 bool* not_ready) {
  // Framing counts too (4 bytes a key and a value): many small keys can
  // pass the request check, and a frame over the server's limit is refused
  // (over 32 bits, its length would be cut).
  if (frame.size() - wire::kHeaderBytes > MaxStoreFrameBytes()) {
    return Explain(
        op,
        absl::InvalidArgumentError(absl::StrCat(
            "the request's frame would be ", frame.size() - wire::kHeaderBytes,
            " bytes, over the store's limit of ", MaxStoreFrameBytes(),
            " (DISTKIT_STORE_MAX_REQUEST_BYTES plus framing)")));
  }
  const absl::Time deadline = CallDeadline(budget);
  // The wait for another thread's call counts against this call's deadline
  // (a heartbeat under a short ScopedStoreDeadline must not wait out another
  // thread's long call to a frozen host).
  absl::Status turn = TakeTurn(deadline);
  if (!turn.ok()) return Explain(op, turn);
  struct TurnEnder {
    TcpStore* store;
    ~TurnEnder() { store->EndTurn(); }
  } end_turn{this};
  // The first retry on a new connection is at once (the old one had just
  // gone stale); later ones back off, so a port that accepts and closes at
  // once is not hammered for the whole budget.
  absl::Duration backoff = absl::ZeroDuration();
  while (true) {
    if (ordered_ == nullptr || ordered_->broken()) {
      // The store host went away and maybe came back: reconnect within the
      // call's budget.
      ordered_.reset();
      absl::StatusOr<std::unique_ptr<Connection>> c =
          Connection::Open(address_, token_, deadline);
      if (!c.ok()) {
        return Explain(op, absl::UnavailableError(
                               absl::StrCat("cannot reach the store server (",
                                            c.status().message(), ")")));
      }
      ordered_ = *std::move(c);
    }
    Answer a = ordered_->Exchange(frame, answered, deadline);
    // The connection was found closed before anything was sent: try again
    // on a new one (the call cannot have happened).
    if (!a.transport.ok() && !a.sent && absl::Now() < deadline) {
      absl::SleepFor(std::min(backoff, deadline - absl::Now()));
      backoff = std::clamp(backoff * 2, absl::Milliseconds(10),
                           absl::Milliseconds(200));
      continue;
    }
    if (absl::Status s = AnswerStatus(a); !s.ok()) return Explain(op, s);
    if (not_ready != nullptr) *not_ready = a.code == wire::kNotReadyCode;
    return std::move(a.payload);
  }
}

absl::Status TcpStore::TakeTurn(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  // mu_ itself is held only for a moment; the call's turn (`busy_`) is what
  // is waited for, up to the deadline.
  if (!mu_.AwaitWithDeadline(absl::Condition(
                                 +[](bool* busy) { return !*busy; }, &busy_),
                             deadline)) {
    return absl::DeadlineExceededError(
        "the call's deadline passed while another call on this store "
        "connection was still in flight (a call waits for the one before "
        "it)");
  }
  busy_ = true;
  return absl::OkStatus();
}

void TcpStore::EndTurn() {
  absl::MutexLock lock(&mu_);
  busy_ = false;
}

absl::StatusOr<std::unique_ptr<TcpStore::Connection>> TcpStore::TakeSpare(
    absl::Time deadline) {
  {
    absl::MutexLock lock(&spare_mu_);
    if (!spare_.empty()) {
      std::unique_ptr<Connection> c = std::move(spare_.back());
      spare_.pop_back();
      return c;
    }
  }
  return Connection::Open(address_, token_, deadline);
}

void TcpStore::ReturnSpare(std::unique_ptr<Connection> c) {
  if (c == nullptr || c->broken()) return;
  absl::MutexLock lock(&spare_mu_);
  if (spare_.size() < kMaxSpareConnections) spare_.push_back(std::move(c));
}

absl::StatusOr<std::string> TcpStore::BlockingCall(absl::string_view op,
                                                   wire::Request request,
                                                   absl::Duration timeout) {
  // One bound for the whole call: both requests share one deadline, and a
  // long poll on the ordered connection (its turn behind another thread's
  // call to a slow host) comes out of the wait's time. Each had its own
  // before: such a call took up to twice its timeout.
  const absl::Time start = absl::Now();
  const absl::Time deadline = CallDeadline(timeout + kBlockingCallMargin);
  request.try_only = true;
  request.number = ServerWaitMillis(timeout);
  bool not_ready = false;
  absl::StatusOr<std::string> at_once =
      Call(op, request, deadline - absl::Now(), &not_ready);
  if (!at_once.ok() || !not_ready) return at_once;
  // Not there yet: wait on a connection of its own. The ordered connection
  // has served everything this client sent before, so what the wait sees is
  // at least as new as this client's own writes.
  const absl::Duration polled = absl::Now() - start;
  const bool long_poll = polled >= kLongPoll;
  // A poll of a moment (the usual case) leaves the wait its whole timeout,
  // which the server's answer then names; a long one comes out of it, and a
  // positive timeout keeps at least a moment (sent as 1 ms, as a
  // sub-millisecond one is), never "no time".
  absl::Duration wait = timeout;
  if (long_poll) {
    wait = timeout - polled;
    if (wait <= absl::ZeroDuration()) {
      wait = timeout > absl::ZeroDuration() ? absl::Nanoseconds(1)
                                            : absl::ZeroDuration();
    }
  }
  request.try_only = false;
  request.number = ServerWaitMillis(wait);
  absl::StatusOr<std::unique_ptr<Connection>> c = TakeSpare(deadline);
  if (!c.ok()) {
    return Explain(
        op, absl::UnavailableError(absl::StrCat(
                "cannot reach the store server (", c.status().message(), ")")));
  }
  std::string frame;
  wire::EncodeRequest(request, &frame);
  Answer a = (*c)->Exchange(frame, /*answered=*/true, deadline);
  if (!a.transport.ok() && !a.sent && absl::Now() < deadline) {
    // A spare found closed (the server restarted, or dropped it) before
    // the request went out: once more on a new connection.
    absl::StatusOr<std::unique_ptr<Connection>> fresh =
        Connection::Open(address_, token_, deadline);
    if (!fresh.ok()) {
      return Explain(op, absl::UnavailableError(
                             absl::StrCat("cannot reach the store server (",
                                          fresh.status().message(), ")")));
    }
    c = *std::move(fresh);
    a = (*c)->Exchange(frame, /*answered=*/true, deadline);
  }
  ReturnSpare(*std::move(c));
  absl::Status s = AnswerStatus(a);
  if (absl::IsDeadlineExceeded(s) && long_poll) {
    // The server names the wait it was given: say where the rest went.
    s = absl::DeadlineExceededError(absl::StrCat(
        s.message(), " (", absl::FormatDuration(polled), " of the call's ",
        absl::FormatDuration(timeout),
        " went to the call before the wait, on the client's ordered "
        "connection)"));
  }
  if (!s.ok()) return Explain(op, s);
  return std::move(a.payload);
}

namespace {

wire::Request OneKey(wire::Op op, absl::string_view key) {
  wire::Request r;
  r.op = op;
  r.keys.emplace_back(key);
  return r;
}

wire::Request Keys(wire::Op op, absl::Span<const std::string> keys) {
  wire::Request r;
  r.op = op;
  r.keys.assign(keys.begin(), keys.end());
  return r;
}

absl::Status Malformed(absl::string_view op) {
  return absl::DataLossError(
      absl::StrCat("store: ", op, ": a malformed answer from the server"));
}

}  // namespace

absl::Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  if (absl::Status bad = CheckStoreRequest("set", {key}, value.size());
      !bad.ok()) {
    return bad;
  }
  // Framed once per thread's buffer: no allocation per set once warm.
  thread_local std::string frame;
  wire::EncodeSet(key, value, &frame);
  absl::Status s =
      CallFramed("set", frame, /*answered=*/false, timeout(), nullptr).status();
  if (frame.capacity() > (size_t{1} << 20)) std::string().swap(frame);
  return s;
}

absl::StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  if (absl::Status bad = CheckStoreRequest("add", {key}, 0); !bad.ok()) {
    return bad;
  }
  wire::Request r = OneKey(wire::Op::kAdd, key);
  r.number = delta;
  absl::StatusOr<std::string> payload = Call("add", r, timeout());
  if (!payload.ok()) return payload.status();
  wire::Reader reader(*payload);
  const int64_t v = reader.I64();
  if (!reader.done()) return Malformed("add");
  return v;
}

absl::StatusOr<std::string> TcpStore::CompareSet(absl::string_view key,
                                                 absl::string_view expected,
                                                 absl::string_view desired) {
  if (absl::Status bad = CheckStoreRequest("compare_set", {key},
                                           expected.size() + desired.size());
      !bad.ok()) {
    return bad;
  }
  wire::Request r = OneKey(wire::Op::kCompareSet, key);
  r.values.emplace_back(expected);
  r.values.emplace_back(desired);
  absl::StatusOr<std::string> payload = Call("compare_set", r, timeout());
  if (!payload.ok()) return payload.status();
  wire::Reader reader(*payload);
  std::string v = reader.String();
  if (!reader.done()) return Malformed("compare_set");
  return v;
}

absl::Status TcpStore::WaitWithTimeout(absl::Span<const std::string> keys,
                                       absl::Duration timeout) {
  if (absl::Status bad = CheckStoreRequest("wait", keys, 0); !bad.ok()) {
    return bad;
  }
  return BlockingCall("wait", Keys(wire::Op::kWait, keys), timeout).status();
}

absl::StatusOr<bool> TcpStore::Check(absl::Span<const std::string> keys) {
  if (absl::Status bad = CheckStoreRequest("check", keys, 0); !bad.ok()) {
    return bad;
  }
  absl::StatusOr<std::string> payload =
      Call("check", Keys(wire::Op::kCheck, keys), timeout());
  if (!payload.ok()) return payload.status();
  wire::Reader reader(*payload);
  const bool ready = reader.U8() != 0;
  if (!reader.done()) return Malformed("check");
  return ready;
}

absl::StatusOr<bool> TcpStore::DeleteKey(absl::string_view key) {
  if (absl::Status bad = CheckStoreRequest("delete_key", {key}, 0); !bad.ok()) {
    return bad;
  }
  absl::StatusOr<std::string> payload =
      Call("delete_key", OneKey(wire::Op::kDeleteKey, key), timeout());
  if (!payload.ok()) return payload.status();
  wire::Reader reader(*payload);
  const bool deleted = reader.U8() != 0;
  if (!reader.done()) return Malformed("delete_key");
  return deleted;
}

absl::StatusOr<int64_t> TcpStore::NumKeys() {
  wire::Request r;
  r.op = wire::Op::kNumKeys;
  absl::StatusOr<std::string> payload = Call("num_keys", r, timeout());
  if (!payload.ok()) return payload.status();
  wire::Reader reader(*payload);
  const int64_t n = reader.I64();
  if (!reader.done()) return Malformed("num_keys");
  return n;
}

absl::StatusOr<std::vector<std::string>> TcpStore::MultiGetWithTimeout(
    absl::Span<const std::string> keys, absl::Duration timeout) {
  const char* op = keys.size() == 1 ? "get" : "multi_get";
  if (absl::Status bad = CheckStoreRequest(op, keys, 0); !bad.ok()) {
    return bad;
  }
  absl::StatusOr<std::string> payload =
      BlockingCall(op, Keys(wire::Op::kMultiGet, keys), timeout);
  if (!payload.ok()) return payload.status();
  wire::Reader reader(*payload);
  const uint32_t n = reader.U32();
  if (n != keys.size()) return Malformed(op);
  std::vector<std::string> values;
  values.reserve(n);
  for (uint32_t i = 0; i < n; ++i) values.push_back(reader.String());
  if (!reader.done()) return Malformed(op);
  return values;
}

absl::Status TcpStore::MultiSet(absl::Span<const std::string> keys,
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
  wire::Request r = Keys(wire::Op::kMultiSet, keys);
  r.values.assign(values.begin(), values.end());
  return Call("multi_set", r, timeout()).status();
}

absl::Status TcpStore::Append(absl::string_view key, absl::string_view value) {
  if (absl::Status bad = CheckStoreRequest("append", {key}, value.size());
      !bad.ok()) {
    return bad;
  }
  wire::Request r = OneKey(wire::Op::kAppend, key);
  r.values.emplace_back(value);
  return Call("append", r, timeout()).status();
}

}  // namespace distkit
