#include "cc/store/internal/socket.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cc/store/internal/wire.h"

namespace distkit {
namespace store_socket {
namespace {

// poll()'s timeout for `deadline`: at least 0, at most a minute per round.
int PollMillis(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  // Clamped before converting: an infinite deadline's milliseconds saturate
  // to INT64_MAX, and adding 1 to that overflowed (to 0 under g++ -O2: a
  // busy spin).
  if (left >= absl::Seconds(60)) return 60000;
  return static_cast<int>(absl::ToInt64Milliseconds(left) + 1);
}

// Waits for `events` on fd until the deadline. false on time-out.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, PollMillis(deadline));
    if (n > 0) return true;
    if (n < 0 && errno == EINTR) continue;
    if (absl::Now() >= deadline) return false;
  }
}

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// One getaddrinfo run on a thread of its own, shared by that thread and its
// caller: the caller may give up at its deadline while the lookup goes on
// (glibc waits 5 s per DNS server per try and cannot be interrupted), so
// whichever lets go last frees it, and the thread never touches the
// caller's stack.
struct Lookup {
  std::string host, service;
  addrinfo hints{};
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  int rc ABSL_GUARDED_BY(mu) = 0;
  addrinfo* found ABSL_GUARDED_BY(mu) = nullptr;
  ~Lookup() {
    if (found != nullptr) freeaddrinfo(found);
  }
};

void* RunLookup(void* arg) {
  std::unique_ptr<std::shared_ptr<Lookup>> owned(
      static_cast<std::shared_ptr<Lookup>*>(arg));
  Lookup& l = **owned;
  pthread_setname_np(pthread_self(), "dk-resolve");  // for top -H
  addrinfo* found = nullptr;
  const int rc =
      getaddrinfo(l.host.c_str(), l.service.c_str(), &l.hints, &found);
  absl::MutexLock lock(&l.mu);
  l.rc = rc;
  l.found = found;
  l.done = true;
  return nullptr;
}

absl::Status ResolveError(const std::string& host, int rc) {
  return absl::UnavailableError(
      absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
}

// Resolves `host` (empty: the wildcard or loopback address) before
// `deadline`. Literal addresses, the empty host, "localhost" (from
// /etc/hosts) and any name without a deadline (Listen) are resolved on this
// thread; other names on a helper thread, so that a DNS server that does
// not answer costs the caller no more than its deadline: DEADLINE_EXCEEDED
// then, naming the host and the bound.
absl::StatusOr<AddrInfoList> Resolve(const std::string& host, int port,
                                     bool passive, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (host.empty() || host == "localhost" ||
      deadline == absl::InfiniteFuture()) {
    const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(),
                               service.c_str(), &hints, &found);
    if (rc != 0) return ResolveError(host, rc);
    return AddrInfoList(found);
  }
  // A literal address needs no lookup (AI_NUMERICHOST never asks DNS).
  addrinfo numeric = hints;
  numeric.ai_flags |= AI_NUMERICHOST;
  if (getaddrinfo(host.c_str(), service.c_str(), &numeric, &found) == 0) {
    return AddrInfoList(found);
  }
  const absl::Time start = absl::Now();
  auto lookup = std::make_shared<Lookup>();
  lookup->host = host;
  lookup->service = service;
  lookup->hints = hints;
  // pthread rather than std::thread: a failed start (the thread limit) is
  // an error to report, not an exception.
  auto* arg = new std::shared_ptr<Lookup>(lookup);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const int err = pthread_create(&thread, &attr, RunLookup, arg);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    delete arg;
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host,
                                               "': no thread for the lookup (",
                                               strerror(err), ")"));
  }
  absl::MutexLock lock(&lookup->mu);
  if (!lookup->mu.AwaitWithDeadline(absl::Condition(&lookup->done), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("cannot resolve '", host, "' within ",
                     absl::FormatDuration(
                         absl::Ceil(deadline - start, absl::Milliseconds(1))),
                     ": the name lookup did not answer"));
  }
  if (lookup->rc != 0) return ResolveError(host, lookup->rc);
  return AddrInfoList(std::exchange(lookup->found, nullptr));
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool ConnectedToItself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
    return false;
  }
  return local_len == peer_len && std::memcmp(&local, &peer, local_len) == 0;
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void Fd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(
    absl::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' is not host:port"));
  }
  std::string host(address.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return std::make_pair(host, port);
}

absl::StatusOr<std::pair<Fd, int>> Listen(const std::string& host, int port) {
  absl::StatusOr<AddrInfoList> addrs =
      Resolve(host, port, /*passive=*/true, absl::InfiniteFuture());
  if (!addrs.ok()) return addrs.status();
  std::string last_error = "no address";
  for (addrinfo* a = addrs->get(); a != nullptr; a = a->ai_next) {
    Fd fd(socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                 a->ai_protocol));
    if (!fd.valid()) {
      last_error = strerror(errno);
      continue;
    }
    // Lets a restarted store take its port back from TIME_WAIT; a port
    // someone still listens on stays refused.
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 ||
        listen(fd.get(), SOMAXCONN) != 0) {
      last_error = strerror(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    const int bound_port =
        bound.ss_family == AF_INET6
            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return std::make_pair(std::move(fd), bound_port);
  }
  return absl::UnavailableError(last_error);
}

absl::StatusOr<Fd> ConnectBefore(const std::string& address,
                                 absl::Time deadline) {
  absl::StatusOr<std::pair<std::string, int>> host_port =
      SplitHostPort(address);
  if (!host_port.ok()) return host_port.status();
  constexpr absl::string_view kNoAttempt = "no attempt";
  std::string last_error(kNoAttempt);
  absl::Duration backoff = absl::Milliseconds(10);
  do {
    absl::StatusOr<AddrInfoList> addrs = Resolve(
        host_port->first, host_port->second, /*passive=*/false, deadline);
    if (!addrs.ok()) {
      // A retry's lookup cut short by the deadline says less than the
      // failure that made the retry.
      if (!absl::IsDeadlineExceeded(addrs.status()) ||
          last_error == kNoAttempt) {
        last_error = std::string(addrs.status().message());
      }
    } else {
      for (addrinfo* a = addrs->get(); a != nullptr; a = a->ai_next) {
        Fd fd(socket(a->ai_family,
                     a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                     a->ai_protocol));
        if (!fd.valid()) {
          last_error = strerror(errno);
          continue;
        }
        int rc = connect(fd.get(), a->ai_addr, a->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
          if (!WaitFor(fd.get(), POLLOUT, deadline)) {
            last_error = "connect timed out";
            continue;
          }
          int err = 0;
          socklen_t len = sizeof(err);
          getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        }
        // A loopback connect to a free ephemeral port can pick that very
        // port as its source and connect to itself (TCP simultaneous open):
        // no server is there, so it counts as nothing listening yet.
        if (rc == 0 && ConnectedToItself(fd.get())) {
          last_error = "connected to itself (nothing listens there)";
          continue;
        }
        if (rc == 0) {
          SetNoDelay(fd.get());
          return fd;
        }
        last_error = strerror(errno);
      }
    }
    // The store's host may not listen yet: ranks start in any order.
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    absl::SleepFor(std::min(backoff, left));
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  } while (absl::Now() < deadline);
  return absl::DeadlineExceededError(last_error);
}

absl::Status WriteAll(int fd, absl::string_view data, absl::Time deadline) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(fd, POLLOUT, deadline)) {
        return absl::DeadlineExceededError("the store host took no bytes");
      }
      continue;
    }
    return absl::UnavailableError(
        absl::StrCat("connection lost (", strerror(errno), ")"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ReadExactly(int fd, char* out, size_t size, absl::Time deadline) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = recv(fd, out + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError("the store host closed the connection");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!WaitFor(fd, POLLIN, deadline)) {
        return absl::DeadlineExceededError("no answer");
      }
      continue;
    }
    return absl::UnavailableError(
        absl::StrCat("connection lost (", strerror(errno), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFrame(int fd, absl::Time deadline,
                                      size_t max_bytes, size_t* announced) {
  char header[store_wire::kHeaderBytes];
  if (absl::Status s = ReadExactly(fd, header, sizeof(header), deadline);
      !s.ok()) {
    return s;
  }
  const size_t length = store_wire::FrameLength(header);
  if (announced != nullptr) *announced = length;
  if (length > max_bytes) {
    return absl::OutOfRangeError(absl::StrCat(
        "a frame of ", length, " bytes (at most ", max_bytes,
        " expected; the first bytes were \"",
        absl::CHexEscape(absl::string_view(header, sizeof(header))), "\")"));
  }
  std::string body(length, '\0');
  if (absl::Status s = ReadExactly(fd, body.data(), body.size(), deadline);
      !s.ok()) {
    return s;
  }
  return body;
}

bool HasPendingInputOrClosed(int fd) {
  char b;
  const ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0 || n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace store_socket
}  // namespace distkit
