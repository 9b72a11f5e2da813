#include "cc/store/store_server.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/store/hash_store.h"
#include "cc/store/internal/handshake.h"
#include "cc/store/internal/socket.h"
#include "cc/store/internal/wire.h"
#include "cc/store/job_failure.h"
#include "cc/store/request_limits.h"

namespace distkit {

namespace wire = store_wire;
using store_socket::Fd;

namespace {

// A refused connection gets its answer, then its input is read and dropped
// (never buffered) for this long, so that the answer is not lost to a reset,
// before it is closed.
constexpr absl::Duration kDrainTime = absl::Seconds(2);
// Read granularity; a connection whose buffered, unprocessed input passes
// the frame it waits for by this much is not read until it catches up.
constexpr size_t kReadChunk = size_t{64} << 10;
// A connection whose unsent answers pass this is not read until they drain:
// a client that sends without reading cannot grow the host's memory.
constexpr size_t kMaxUnsentBytes = size_t{4} << 20;
// How long the loop keeps polling without sleeping after it served something.
constexpr absl::Duration kBusyPollTime = absl::Microseconds(50);
// At most this many reads of one connection per event: level-triggered
// epoll reports what is left next round, after the other connections' turn,
// so a peer that streams without pause cannot hold the loop (16 reads of
// kReadChunk: 1 MiB).
constexpr int kMaxReadsPerEvent = 16;
// TCP keep-alive on accepted connections: a client whose host vanished
// (no FIN, no RST) is found out and its connection closed after about
// kKeepIdle + kKeepCount * kKeepInterval seconds of silence.
constexpr int kKeepIdleSeconds = 60;
constexpr int kKeepIntervalSeconds = 10;
constexpr int kKeepCount = 6;
// How long the listener is left unwatched after accept ran out of
// descriptors (unless a connection closes first).
constexpr absl::Duration kAcceptPause = absl::Milliseconds(100);

// The loop serving on this thread, if any: tells its own changes of the
// state from those of the host process's other threads.
thread_local const void* current_loop = nullptr;

void PutEmptyAnswer(std::string* out) {
  wire::EndFrame(out, wire::BeginFrame(out, 0));
}

}  // namespace

class StoreServer::Loop {
 public:
  Loop(std::string address, std::string token, Fd listener,
       absl::Duration handshake_timeout)
      : address_(std::move(address)),
        token_(std::move(token)),
        handshake_timeout_(handshake_timeout),
        listener_(std::move(listener)) {
    state_.SetChangeListener([this] { OnStateChanged(); });
    // The host process writes to the state directly: held to the limits
    // that clients are.
    state_.EnforceRequestLimits();
  }

  absl::Status Start() {
    epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
    wake_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!epoll_.valid() || !wake_.valid()) {
      return absl::UnavailableError(
          absl::StrCat("store server: epoll: ", strerror(errno)));
    }
    Watch(listener_.get(), EPOLLIN, EPOLL_CTL_ADD);
    Watch(wake_.get(), EPOLLIN, EPOLL_CTL_ADD);
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  void Stop() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    Wake();
    thread_.join();
    conns_.clear();  // closes every client connection
    listener_.Reset();
    open_.store(0);
  }

  ~Loop() { Stop(); }

  HashStore& state() { return state_; }
  int connections() const { return open_.load(); }
  StoreServer::Served served() const {
    return {accepted_.load(), requests_.load(), keys_.load()};
  }

 private:
  struct Parked {
    std::vector<std::string> keys;
    size_t next_missing = 0;  // keys before it were present when last looked
    absl::Time deadline;
    absl::Duration timeout;
    bool want_values = false;
  };

  struct Conn {
    Fd fd;
    // Received bytes are in[in_pos, in_end); `in` only grows (resizing a
    // string zero-fills it, which per read cost more than the read).
    std::string in;
    size_t in_pos = 0;
    size_t in_end = 0;
    std::string out;
    size_t out_pos = 0;
    // The handshake (internal/handshake.h): the nonces once the hello has
    // come, then authenticated once the client's proof has.
    std::string client_nonce;
    std::string server_nonce;
    bool authenticated = false;
    // Closed when not authenticated by then (Options::handshake_timeout).
    absl::Time handshake_until;
    bool refused = false;  // answered, then drained until drain_until
    absl::Time drain_until;
    // The client hung up, or its answers could not be sent: what it sent
    // is still applied (Finish), its answers sent only while the socket
    // takes them at once; once one is not (`mute`), none is.
    bool departed = false;
    bool mute = false;
    bool reading = true;   // EPOLLIN wanted
    bool writing = false;  // EPOLLOUT wanted
    std::optional<Parked> parked;
  };

  void Watch(int fd, uint32_t events, int op) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    epoll_ctl(epoll_.get(), op, fd, &ev);
  }

  void Wake() {
    const uint64_t one = 1;
    (void)!write(wake_.get(), &one, sizeof(one));
  }

  // Changes made by the loop itself are noticed after each round; those of
  // other threads (the host process using state()) wake the loop.
  void OnStateChanged() {
    if (current_loop == this) {
      changed_ = true;
    } else {
      external_change_.store(true);
      Wake();
    }
  }

  void Run() {
    current_loop = this;
    std::vector<epoll_event> events(256);
    absl::Time busy_until = absl::InfinitePast();
    while (!stop_.load()) {
      // Right after serving, poll without sleeping for a moment: a client
      // that just got its answer usually sends the next request within
      // microseconds, and waking a sleeping thread costs more than that.
      const bool hot = absl::Now() < busy_until;
      // Nor when the last round changed the state after its recheck (a
      // departed client's last sets): parked waits see it at once.
      const int n = epoll_wait(epoll_.get(), events.data(),
                               static_cast<int>(events.size()),
                               hot || changed_ ? 0 : WaitMillis());
      if (n > 0) busy_until = absl::Now() + kBusyPollTime;
      if (n < 0 && errno != EINTR) return Fail(errno);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listener_.get()) {
          Accept();
        } else if (fd == wake_.get()) {
          uint64_t count;
          (void)!read(wake_.get(), &count, sizeof(count));
        } else {
          OnEvent(fd, events[i].events);
        }
      }
      if (external_change_.exchange(false)) changed_ = true;
      if (changed_) {
        changed_ = false;
        RecheckParked();
      }
      ExpireDeadlines();
      MaybeResumeAccepting();
    }
  }

  // Until the nearest parked deadline or drain end; at most a second.
  int WaitMillis() const {
    absl::Time next = absl::Now() + absl::Seconds(1);
    if (accept_paused_until_.has_value()) {
      next = std::min(next, *accept_paused_until_);
    }
    for (int fd : waiting_) {
      const Conn& c = *conns_.at(fd);
      if (c.parked) next = std::min(next, c.parked->deadline);
      if (c.refused) next = std::min(next, c.drain_until);
      if (!c.authenticated && !c.refused) {
        next = std::min(next, c.handshake_until);
      }
    }
    // `next` is at most a second away: the conversion cannot overflow.
    const absl::Duration left = next - absl::Now();
    if (left <= absl::ZeroDuration()) return 0;
    return static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
  }

  void Accept() {
    while (true) {
      const int fd = accept4(listener_.get(), nullptr, nullptr,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // Out of descriptors (or memory) for now: the pending connection
        // stays, so the level-triggered listener stays readable and the
        // loop would spin. Stop watching it until a connection closes or a
        // moment has passed.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
            errno == ENOMEM) {
          PauseAccepting();
        }
        return;  // EAGAIN: none pending
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepIdleSeconds,
                 sizeof(kKeepIdleSeconds));
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepIntervalSeconds,
                 sizeof(kKeepIntervalSeconds));
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &kKeepCount, sizeof(kKeepCount));
      accepted_.fetch_add(1, std::memory_order_relaxed);
      auto conn = std::make_unique<Conn>();
      conn->fd = Fd(fd);
      // Until it proves the token, it has a deadline (ExpireDeadlines).
      conn->handshake_until = absl::Now() + handshake_timeout_;
      Watch(fd, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
      conns_[fd] = std::move(conn);
      waiting_.insert(fd);
      open_.fetch_add(1);
    }
  }

  void Close(int fd) {
    waiting_.erase(fd);
    if (conns_.erase(fd) > 0) open_.fetch_sub(1);
    // A descriptor is free again: accept at the end of this round.
    if (accept_paused_until_.has_value()) accept_paused_until_ = absl::Now();
  }

  void PauseAccepting() {
    if (accept_paused_until_.has_value()) return;
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
    accept_paused_until_ = absl::Now() + kAcceptPause;
  }

  void MaybeResumeAccepting() {
    if (!accept_paused_until_.has_value() ||
        absl::Now() < *accept_paused_until_) {
      return;
    }
    accept_paused_until_.reset();
    Watch(listener_.get(), EPOLLIN, EPOLL_CTL_ADD);
  }

  void OnEvent(int fd, uint32_t events) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn& c = *it->second;
    const bool hung_up = events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);
    if (c.refused) {
      // Its answer is sent, its input drained until it closes.
      if (!ServeBuffered(c) || !ReadAvailable(c)) return Close(fd);
      return UpdateInterest(c);
    }
    // A client that hung up reads no more (nor is it left watched: a hang-up
    // stays reported, and its connection, held for answers it does not
    // read, would spin the loop).
    if (hung_up) return Finish(fd);
    if ((events & EPOLLOUT) && !ServeBuffered(c)) return Finish(fd);
    if ((events & EPOLLIN) && (!ReadAvailable(c) || !ServeBuffered(c))) {
      return Finish(fd);
    }
    UpdateInterest(c);
  }

  // The client has gone, or hung up: what it sent is applied in order (its
  // last sets are not lost to answers it left unread), its answers dropped
  // unless the socket takes them at once, up to a request that would wait
  // (dropped with what follows it: it could end only after the client has
  // gone), and the connection closes.
  void Finish(int fd) {
    auto it = conns_.find(fd);
    if (it == conns_.end()) return;
    Conn& c = *it->second;
    if (!c.refused && !c.parked) {
      c.departed = true;
      SendOrDrop(c);
      // What is buffered, then what the socket still holds (a closed peer
      // sends no more, so this ends).
      (void)Process(c);
      (void)ReadAvailable(c, /*all=*/true);
    }
    Close(fd);
  }

  // A departed connection's answers: sent while the socket takes them at
  // once, else dropped, and every later one with them (the stream is cut).
  void SendOrDrop(Conn& c) {
    if (!c.mute && (!Flush(c) || c.out_pos < c.out.size())) c.mute = true;
    if (c.mute) {
      c.out.clear();
      c.out_pos = 0;
    }
  }

  // The bytes the connection's next frame needs in its buffer.
  size_t NextFrameBytes(const Conn& c) const {
    const size_t have = c.in_end - c.in_pos;
    if (have < wire::kHeaderBytes) return wire::kHeaderBytes;
    return wire::kHeaderBytes + wire::FrameLength(c.in.data() + c.in_pos);
  }

  // Reads what the socket holds and serves each complete frame. false when
  // the client has gone.
  // At most kMaxReadsPerEvent reads unless `all` (a departed client: its
  // socket holds a bounded rest and sends no more); what is left is read on
  // the next event.
  bool ReadAvailable(Conn& c, bool all = false) {
    char scratch[4096];
    for (int reads = 0; all || reads < kMaxReadsPerEvent; ++reads) {
      if (c.refused) {
        // Checked here, not only after the round: a peer that never stops
        // sending would otherwise keep the loop in this drain.
        if (absl::Now() >= c.drain_until) return false;
        const ssize_t n = recv(c.fd.get(), scratch, sizeof(scratch), 0);
        if (n > 0) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      }
      if (!WantsInput(c)) return true;
      const size_t have = c.in_end;
      const size_t need = NextFrameBytes(c) > have - c.in_pos
                              ? NextFrameBytes(c) - (have - c.in_pos)
                              : 0;
      // Before the token is proven, at most a hello's frame at a time (and
      // no 64 KiB buffer): an unauthenticated peer sizes almost nothing.
      const size_t chunk =
          c.authenticated
              ? std::max(kReadChunk, std::min(need, size_t{4} << 20))
              : wire::kHeaderBytes + wire::kMaxHelloBytes;
      if (c.in.size() < have + chunk) {
        c.in.resize(c.authenticated ? std::max(have + chunk, 2 * c.in.size())
                                    : have + chunk);
      }
      const ssize_t n = recv(c.fd.get(), c.in.data() + have, chunk, 0);
      c.in_end = have + std::max<ssize_t>(n, 0);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      Process(c);
    }
    return true;  // more may wait: level-triggered epoll reports it again
  }

  // Whether the connection's unsent answers have piled up: neither its
  // input is read nor its buffered requests served until they drain.
  static bool OutputFull(const Conn& c) {
    return c.out.size() - c.out_pos > kMaxUnsentBytes;
  }

  // Input is read while the connection is not parked (or only a little
  // ahead of it), so a client cannot make the host buffer without bound.
  bool WantsInput(const Conn& c) const {
    if (c.refused) return true;
    // A departed client's requests after a parked one are dropped.
    if (c.departed && c.parked) return false;
    // Nor while its answers pile up unread.
    if (OutputFull(c)) return false;
    const size_t have = c.in_end - c.in_pos;
    if (c.parked) return have < kReadChunk;
    return have < NextFrameBytes(c) + kReadChunk;
  }

  void UpdateInterest(Conn& c) {
    const bool reading = WantsInput(c);
    const bool writing = c.out_pos < c.out.size();
    if (reading == c.reading && writing == c.writing) return;
    c.reading = reading;
    c.writing = writing;
    Watch(c.fd.get(),
          (reading ? EPOLLIN : 0) | EPOLLRDHUP | (writing ? EPOLLOUT : 0),
          EPOLL_CTL_MOD);
  }

  // Sends buffered answers. false when the client has gone.
  bool Flush(Conn& c) {
    while (c.out_pos < c.out.size()) {
      const ssize_t n = send(c.fd.get(), c.out.data() + c.out_pos,
                             c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        // What was sent is let go before more is added (ServeBuffered adds
        // as the unsent part drains): pipelined answers would otherwise all
        // stay in `out` until it empties, however many were sent.
        if (c.out_pos >= kMaxUnsentBytes) {
          c.out.erase(0, c.out_pos);
          c.out_pos = 0;
        }
        return true;
      }
      return false;
    }
    c.out.clear();
    c.out_pos = 0;
    if (c.refused) shutdown(c.fd.get(), SHUT_WR);
    return true;
  }

  // Answers `status` and stops serving the connection.
  void Refuse(Conn& c, const absl::Status& status) {
    wire::EncodeError(status, &c.out);
    c.refused = true;
    c.parked.reset();
    std::string().swap(c.in);
    c.in_pos = c.in_end = 0;
    c.drain_until = absl::Now() + kDrainTime;
    waiting_.insert(c.fd.get());
  }

  // Sends what it can, then serves the frames already buffered while the
  // client takes their answers. false when the client has gone.
  bool ServeBuffered(Conn& c) {
    do {
      if (!Flush(c)) return false;
    } while (!OutputFull(c) && Process(c));
    return true;
  }

  // Serves the complete frames in the buffer, in order, until one parks or
  // the unsent answers pile up: 64 KiB of buffered gets of a large value
  // would otherwise all be answered at once, in memory. Whether it served
  // any.
  bool Process(Conn& c) {
    bool served = false;
    while (!c.refused && !c.parked && !OutputFull(c)) {
      const size_t have = c.in_end - c.in_pos;
      if (have < wire::kHeaderBytes) break;
      const size_t length = wire::FrameLength(c.in.data() + c.in_pos);
      const size_t limit =
          c.authenticated ? MaxStoreFrameBytes() : wire::kMaxHelloBytes;
      if (length > limit) {
        Refuse(c, c.authenticated ? absl::ResourceExhaustedError(absl::StrCat(
                                        "store: a request of ", length,
                                        " bytes is over the store's limit of ",
                                        MaxStoreRequestBytes(),
                                        " (DISTKIT_STORE_MAX_REQUEST_BYTES)"))
                                  : absl::UnauthenticatedError(
                                        "store: request carries no job token"));
        break;
      }
      if (have < wire::kHeaderBytes + length) break;
      absl::StatusOr<wire::Request> request =
          wire::DecodeRequest(absl::string_view(c.in).substr(
              c.in_pos + wire::kHeaderBytes, length));
      c.in_pos += wire::kHeaderBytes + length;
      if (!request.ok()) {
        Refuse(c, request.status());
        break;
      }
      Handle(c, *std::move(request));
      if (c.departed) SendOrDrop(c);
      served = true;
    }
    if (c.in_pos == c.in_end) {
      c.in_pos = c.in_end = 0;
      // A large request's buffer is not kept for the connection's life.
      if (c.in.size() > 4 * kReadChunk) std::string().swap(c.in);
    } else if (c.in_pos > kReadChunk) {
      std::memmove(c.in.data(), c.in.data() + c.in_pos, c.in_end - c.in_pos);
      c.in_end -= c.in_pos;
      c.in_pos = 0;
    }
    return served;
  }

  // The hello (answered with this server's nonce and proof), then the
  // client's proof; nothing else is read before it.
  void Authenticate(Conn& c, const wire::Request& request) {
    const absl::Status no_token =
        absl::UnauthenticatedError("store: request carries no job token");
    if (c.server_nonce.empty()) {
      if (request.op != wire::Op::kHello) return Refuse(c, no_token);
      if (request.magic != wire::kMagic) {
        return Refuse(c, absl::InvalidArgumentError(
                             "store: the client speaks another protocol "
                             "version (expected DKS2)"));
      }
      if (request.values[0].size() != store_auth::kNonceBytes) {
        return Refuse(c, absl::InvalidArgumentError(
                             "store: a hello without a proper nonce"));
      }
      c.client_nonce = request.values[0];
      c.server_nonce = store_auth::NewNonce();
      const size_t begin = wire::BeginFrame(&c.out, 0);
      wire::PutU32(&c.out, wire::kMagic);
      wire::PutString(&c.out, c.server_nonce);
      wire::PutString(&c.out, store_auth::ServerProof(token_, c.server_nonce,
                                                      c.client_nonce));
      return wire::EndFrame(&c.out, begin);
    }
    if (request.op != wire::Op::kProof) return Refuse(c, no_token);
    const std::string& given = request.values[0];
    if (!store_auth::ConstantTimeEquals(
            given,
            store_auth::ClientProof(token_, c.server_nonce, c.client_nonce))) {
      // A client without a token proves the empty one.
      const bool none = store_auth::ConstantTimeEquals(
          given, store_auth::ClientProof("", c.server_nonce, c.client_nonce));
      return Refuse(
          c, none ? no_token
                  : absl::UnauthenticatedError("store: wrong job token"));
    }
    c.authenticated = true;
    if (!c.parked && !c.refused) waiting_.erase(c.fd.get());
    std::string().swap(c.client_nonce);
    std::string().swap(c.server_nonce);
    PutEmptyAnswer(&c.out);
  }

  void Handle(Conn& c, wire::Request request) {
    if (!c.authenticated) return Authenticate(c, request);
    const wire::Op op = request.op;
    size_t value_bytes = 0;
    for (const std::string& v : request.values) value_bytes += v.size();
    if (absl::Status bad =
            CheckStoreRequest(wire::OpName(op), request.keys, value_bytes);
        !bad.ok() || op == wire::Op::kHello || op == wire::Op::kProof) {
      if (op == wire::Op::kHello || op == wire::Op::kProof) {
        bad = absl::InvalidArgumentError(
            absl::StrCat("store: a second ", wire::OpName(op)));
      }
      // A refused set has no answer of its own: the client hears of it at
      // its next call, and the connection closes.
      if (op == wire::Op::kSet) return Refuse(c, bad);
      return wire::EncodeError(bad, &c.out);
    }
    requests_.fetch_add(1, std::memory_order_relaxed);
    keys_.fetch_add(static_cast<int64_t>(request.keys.size()),
                    std::memory_order_relaxed);
    std::string& out = c.out;
    switch (op) {
      case wire::Op::kSet:
        (void)state_.Set(request.keys[0], request.values[0]);
        return;
      case wire::Op::kAdd: {
        absl::StatusOr<int64_t> v = state_.Add(request.keys[0], request.number);
        if (!v.ok()) return wire::EncodeError(v.status(), &out);
        const size_t begin = wire::BeginFrame(&out, 0);
        wire::PutI64(&out, *v);
        return wire::EndFrame(&out, begin);
      }
      case wire::Op::kCompareSet: {
        absl::StatusOr<std::string> v = state_.CompareSet(
            request.keys[0], request.values[0], request.values[1]);
        if (!v.ok()) return wire::EncodeError(v.status(), &out);
        const size_t begin = wire::BeginFrame(&out, 0);
        wire::PutString(&out, *v);
        return wire::EndFrame(&out, begin);
      }
      case wire::Op::kCheck: {
        absl::StatusOr<bool> ready = state_.Check(request.keys);
        const size_t begin = wire::BeginFrame(&out, 0);
        wire::PutU8(&out, ready.ok() && *ready ? 1 : 0);
        return wire::EndFrame(&out, begin);
      }
      case wire::Op::kDeleteKey: {
        absl::StatusOr<bool> deleted = state_.DeleteKey(request.keys[0]);
        const size_t begin = wire::BeginFrame(&out, 0);
        wire::PutU8(&out, deleted.ok() && *deleted ? 1 : 0);
        return wire::EndFrame(&out, begin);
      }
      case wire::Op::kNumKeys: {
        absl::StatusOr<int64_t> n = state_.NumKeys();
        const size_t begin = wire::BeginFrame(&out, 0);
        wire::PutI64(&out, n.ok() ? *n : 0);
        return wire::EndFrame(&out, begin);
      }
      case wire::Op::kMultiSet:
        (void)state_.MultiSet(request.keys, request.values);
        return PutEmptyAnswer(&out);
      case wire::Op::kAppend: {
        // Bounded like a set's value: appends could otherwise grow one value
        // past what any answer may carry.
        const absl::Status s = state_.AppendAtMost(
            request.keys[0], request.values[0], MaxStoreRequestBytes());
        if (!s.ok()) return wire::EncodeError(s, &out);
        return PutEmptyAnswer(&out);
      }
      case wire::Op::kWait:
      case wire::Op::kMultiGet:
        return StartWait(c, std::move(request));
      case wire::Op::kHello:
      case wire::Op::kProof:
        return;
    }
  }

  // Answers a wait / multi_get whose keys are all present; otherwise answers
  // "not ready" (try_only), times it out (no time left) or parks it.
  void StartWait(Conn& c, wire::Request request) {
    LookForJobFailure();
    Parked p;
    // Values nobody will read are not copied.
    p.want_values = request.op == wire::Op::kMultiGet && !c.mute;
    p.timeout = absl::Milliseconds(std::max<int64_t>(request.number, 0));
    p.deadline = absl::Now() + p.timeout;
    p.keys = std::move(request.keys);
    // A poll (try_only) hears "not ready", never the job's failure: it asks
    // whether the keys are there, not to wait for them.
    if (TryFinish(c, p, /*fail_missing=*/!request.try_only)) return;
    if (request.try_only) {
      wire::EndFrame(&c.out, wire::BeginFrame(&c.out, wire::kNotReadyCode));
      return;
    }
    if (p.timeout <= absl::ZeroDuration()) {
      return wire::EncodeError(state_.TimedOut(p.keys, p.timeout), &c.out);
    }
    c.parked = std::move(p);
    waiting_.insert(c.fd.get());
  }

  void Unpark(Conn& c) {
    c.parked.reset();
    if (!c.refused) waiting_.erase(c.fd.get());
  }

  // Answers `p` when every key is present. Looks only from the first key
  // that was missing before, so N waits on N keys cost O(N) per change.
  // After the job failed (job_failure.h), a request with keys missing is
  // answered with the failure: they may never come.
  bool TryFinish(Conn& c, Parked& p, bool fail_missing = true) {
    std::vector<std::string> values;
    // The answer's frame: code, count, then each value with its length.
    const size_t framing = 1 + 4 + 4 * p.keys.size();
    const size_t max_values =
        MaxStoreFrameBytes() > framing ? MaxStoreFrameBytes() - framing : 0;
    size_t value_bytes = 0;
    p.next_missing = state_.FirstMissing(p.keys, p.next_missing,
                                         p.want_values ? &values : nullptr,
                                         max_values, &value_bytes);
    if (p.next_missing < p.keys.size()) {
      if (!fail_missing || !job_failure_.has_value()) return false;
      wire::EncodeError(JobFailedError(*job_failure_, p.keys), &c.out);
      return true;
    }
    if (p.want_values && value_bytes > max_values) {
      // Refused, not cut short: the connection stays in step and open.
      wire::EncodeError(
          absl::ResourceExhaustedError(absl::StrCat(
              "store: the answer to a ",
              p.keys.size() == 1 ? "get" : "multi_get", " of ", p.keys.size(),
              " key(s) would be ", framing + value_bytes, " bytes (",
              value_bytes, " of values), over the store's limit of ",
              MaxStoreFrameBytes(),
              " for a frame (DISTKIT_STORE_MAX_REQUEST_BYTES plus framing); "
              "ask for fewer keys at a time")),
          &c.out);
      return true;
    }
    const size_t begin = wire::BeginFrame(&c.out, 0);
    if (p.want_values) {
      wire::PutU32(&c.out, static_cast<uint32_t>(values.size()));
      for (const std::string& v : values) wire::PutString(&c.out, v);
    }
    wire::EndFrame(&c.out, begin);
    return true;
  }

  // After a change: answer every parked request whose keys are now present,
  // and serve what its connection sent after it.
  // Once per round of changes, not per parked request.
  // Looked up again each time (one hash lookup), not latched: a deleted
  // record (a server kept for the next attempt) fails nothing more.
  void LookForJobFailure() {
    std::vector<std::string> what;
    const std::string key = kJobFailedKey;
    if (state_.FirstMissing({&key, 1}, 0, &what) == 1) {
      job_failure_ = what[0];
    } else {
      job_failure_.reset();
    }
  }

  // A parked connection's request was answered: serves the frames behind
  // it. False when the client has gone (then Finish it).
  bool Resume(Conn& c) {
    Unpark(c);
    if (!ServeBuffered(c)) return false;
    UpdateInterest(c);
    return true;
  }

  void RecheckParked() {
    LookForJobFailure();
    std::vector<int> closed;
    const std::vector<int> fds(waiting_.begin(), waiting_.end());
    for (int fd : fds) {
      Conn& c = *conns_.at(fd);
      if (!c.parked || !TryFinish(c, *c.parked)) continue;
      if (!Resume(c)) closed.push_back(fd);
    }
    for (int fd : closed) Finish(fd);
    // Serving the frames behind a parked request may have changed state.
    if (changed_) {
      changed_ = false;
      RecheckParked();
    }
  }

  void ExpireDeadlines() {
    const absl::Time now = absl::Now();
    std::vector<int> closed;
    std::vector<int> gone;
    const std::vector<int> fds(waiting_.begin(), waiting_.end());
    for (int fd : fds) {
      Conn& c = *conns_.at(fd);
      if (c.refused && now >= c.drain_until) {
        closed.push_back(fd);
        continue;
      }
      if (!c.authenticated && !c.refused && now >= c.handshake_until) {
        closed.push_back(fd);
        continue;
      }
      if (!c.parked || now < c.parked->deadline) continue;
      wire::EncodeError(state_.TimedOut(c.parked->keys, c.parked->timeout),
                        &c.out);
      if (!Resume(c)) gone.push_back(fd);
    }
    for (int fd : closed) Close(fd);
    for (int fd : gone) Finish(fd);
  }

  // Ends the loop after epoll failed: said on stderr, and every client
  // hears of it (an error answer to a parked request; a closed connection,
  // and a closed listener for new ones) rather than waiting on a store that
  // no longer serves.
  void Fail(int error) {
    const absl::Status failed = absl::UnavailableError(
        absl::StrCat("store: the store server at ", address_,
                     " stopped serving (epoll_wait: ", strerror(error), ")"));
    std::fprintf(stderr, "distkit: %s\n",
                 std::string(failed.message()).c_str());
    for (auto& [fd, conn] : conns_) {
      Conn& c = *conn;
      if (c.authenticated && !c.refused) wire::EncodeError(failed, &c.out);
      (void)Flush(c);
    }
    waiting_.clear();
    conns_.clear();
    open_.store(0);
    listener_.Reset();
  }

  const std::string address_;
  const std::string token_;
  const absl::Duration handshake_timeout_;
  HashStore state_;
  Fd listener_;
  // While set, the listener is out of epoll (accept ran out of
  // descriptors) until then, or until a connection closes.
  std::optional<absl::Time> accept_paused_until_;
  Fd epoll_;
  Fd wake_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> external_change_{false};
  std::atomic<int> open_{0};
  // What was served (StoreServer::served): connections accepted, requests
  // answered after authentication. Written by the loop thread only.
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> keys_{0};
  bool changed_ = false;  // loop thread only
  // kJobFailedKey's value while it is set; loop thread only.
  std::optional<std::string> job_failure_;
  absl::flat_hash_map<int, std::unique_ptr<Conn>> conns_;
  // Connections with a deadline: a parked request, a refusal draining, or
  // a handshake not yet finished.
  absl::flat_hash_set<int> waiting_;
};

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(
    const Options& options) {
  absl::StatusOr<std::pair<std::string, int>> host_port =
      store_socket::SplitHostPort(options.address);
  if (!host_port.ok()) return host_port.status();
  absl::StatusOr<std::pair<Fd, int>> listening =
      store_socket::Listen(host_port->first, host_port->second);
  if (!listening.ok()) {
    return absl::UnavailableError(
        absl::StrCat("store server: cannot listen on ", options.address, " (",
                     listening.status().message(),
                     "; address in use, or not an address of this host)"));
  }
  std::unique_ptr<StoreServer> server(new StoreServer());
  server->port_ = listening->second;
  const size_t colon = options.address.rfind(':');
  server->address_ =
      absl::StrCat(options.address.substr(0, colon), ":", server->port_);
  server->loop_ = std::make_unique<Loop>(server->address_, options.token,
                                         std::move(listening->first),
                                         options.handshake_timeout);
  if (absl::Status s = server->loop_->Start(); !s.ok()) return s;
  return server;
}

void StoreServer::Shutdown() {
  if (loop_ == nullptr) return;
  loop_->Stop();
  // DISTKIT_STORE_STATS=<file>: one line of what this server served, for
  // start-up scaling checks (what grows with the number of ranks).
  const char* stats = std::getenv("DISTKIT_STORE_STATS");
  if (stats != nullptr && *stats != '\0' && !stats_written_) {
    stats_written_ = true;
    const Served s = served();
    if (FILE* f = std::fopen(stats, "a")) {
      std::fprintf(f, "store %s: connections=%lld requests=%lld keys=%lld\n",
                   address_.c_str(), static_cast<long long>(s.connections),
                   static_cast<long long>(s.requests),
                   static_cast<long long>(s.keys));
      std::fclose(f);
    }
  }
}

StoreServer::~StoreServer() { Shutdown(); }

HashStore& StoreServer::state() { return loop_->state(); }

int StoreServer::connections() const { return loop_->connections(); }

StoreServer::Served StoreServer::served() const { return loop_->served(); }

}  // namespace distkit
