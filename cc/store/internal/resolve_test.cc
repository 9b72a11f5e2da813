// Name resolution under a deadline (socket.h: ConnectBefore). A DNS server
// that does not answer is simulated by interposing getaddrinfo for this
// binary: the names below ending in ".distkit.test" answer late or not at
// all, every other name goes to the real resolver. Interposing (rather than
// a hook in socket.cc) tests the code as it ships, and the code before the
// threaded lookup too, which blocked for the whole lookup.

#include <dlfcn.h>
#include <netdb.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cc/store/internal/socket.h"
#include "cc/store/tcp_store.h"
#include "gtest/gtest.h"
#include "testing/cc/time_scale.h"

namespace {

using GetAddrInfoFn = int (*)(const char*, const char*, const addrinfo*,
                              addrinfo**);
using FreeAddrInfoFn = void (*)(addrinfo*);

// Answers 127.0.0.1 after kSlowLookup.
constexpr char kSlowHost[] = "slow.distkit.test";
// Answers "no such name" after a short wait.
constexpr char kMissingHost[] = "missing.distkit.test";
const absl::Duration kSlowLookup = absl::Seconds(3);

absl::Mutex mu;
// The lists the slow lookups returned and not yet freed, and how many
// slow lookups returned at all.
int slow_lists_live ABSL_GUARDED_BY(mu) = 0;
int slow_lookups_returned ABSL_GUARDED_BY(mu) = 0;
// The thread of the last lookup of each kind.
pid_t last_slow_tid ABSL_GUARDED_BY(mu) = 0;
pid_t last_other_tid ABSL_GUARDED_BY(mu) = 0;
// The first list each slow lookup returned (freeaddrinfo gets its head).
addrinfo* slow_heads[64] ABSL_GUARDED_BY(mu) = {};

GetAddrInfoFn RealGetAddrInfo() {
  static GetAddrInfoFn real =
      reinterpret_cast<GetAddrInfoFn>(dlsym(RTLD_NEXT, "getaddrinfo"));
  return real;
}

FreeAddrInfoFn RealFreeAddrInfo() {
  static FreeAddrInfoFn real =
      reinterpret_cast<FreeAddrInfoFn>(dlsym(RTLD_NEXT, "freeaddrinfo"));
  return real;
}

}  // namespace

extern "C" int getaddrinfo(const char* node, const char* service,
                           const addrinfo* hints, addrinfo** res) {
  const pid_t tid = gettid();
  const bool slow = node != nullptr && std::strcmp(node, kSlowHost) == 0;
  const bool missing = node != nullptr && std::strcmp(node, kMissingHost) == 0;
  if (!slow && !missing) {
    {
      absl::MutexLock lock(&mu);
      last_other_tid = tid;
    }
    return RealGetAddrInfo()(node, service, hints, res);
  }
  // A literal-address try (AI_NUMERICHOST) gets its answer at once, as from
  // the real resolver.
  if (hints != nullptr && (hints->ai_flags & AI_NUMERICHOST) != 0) {
    return EAI_NONAME;
  }
  if (missing) {
    absl::SleepFor(absl::Milliseconds(20));
    return EAI_NONAME;
  }
  absl::SleepFor(kSlowLookup);
  const int rc = RealGetAddrInfo()("127.0.0.1", service, hints, res);
  absl::MutexLock lock(&mu);
  last_slow_tid = tid;
  ++slow_lookups_returned;
  if (rc == 0) {
    for (addrinfo*& head : slow_heads) {
      if (head == nullptr) {
        head = *res;
        ++slow_lists_live;
        break;
      }
    }
  }
  return rc;
}

extern "C" void freeaddrinfo(addrinfo* list) {
  {
    absl::MutexLock lock(&mu);
    for (addrinfo*& head : slow_heads) {
      if (head != nullptr && head == list) {
        head = nullptr;
        --slow_lists_live;
      }
    }
  }
  RealFreeAddrInfo()(list);
}

namespace distkit {
namespace {

using testing::Scaled;

// A listening socket on 127.0.0.1 and its port.
std::pair<store_socket::Fd, int> ListenOnLoopback() {
  absl::StatusOr<std::pair<store_socket::Fd, int>> l =
      store_socket::Listen("127.0.0.1", 0);
  EXPECT_TRUE(l.ok()) << l.status();
  return *std::move(l);
}

// Waits (bounded) until every slow lookup started has returned and its list
// has been freed.
bool AllReturnedAndFreed(int* started) ABSL_SHARED_LOCKS_REQUIRED(mu) {
  return slow_lookups_returned >= *started && slow_lists_live == 0;
}

bool SlowLookupsFinished(int started) {
  absl::MutexLock lock(&mu);
  return mu.AwaitWithTimeout(absl::Condition(AllReturnedAndFreed, &started),
                             kSlowLookup + Scaled(absl::Seconds(10)));
}

int SlowLookupsReturned() {
  absl::MutexLock lock(&mu);
  return slow_lookups_returned;
}

TEST(ResolveTest, ALookupThatDoesNotAnswerEndsAtTheDeadline) {
  const int before = SlowLookupsReturned();
  const absl::Duration bound = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  absl::StatusOr<store_socket::Fd> fd =
      store_socket::ConnectBefore(absl::StrCat(kSlowHost, ":1"), start + bound);
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(fd.status().message(),
                                "cannot resolve 'slow.distkit.test' within "))
      << fd.status();
  EXPECT_TRUE(absl::StrContains(fd.status().message(),
                                "ms: the name lookup did not answer"))
      << fd.status();
  // Well before the lookup's own end: the caller did not wait for it.
  EXPECT_LT(took, bound + Scaled(absl::Seconds(1))) << took;
  // The lookup ends after its caller has gone: its result is freed (ASan
  // would name a write to the caller's stack or to freed memory).
  EXPECT_TRUE(SlowLookupsFinished(before + 1));
}

TEST(ResolveTest, TheStoreClientNamesTheLookupThatDidNotAnswer) {
  const int before = SlowLookupsReturned();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      TcpStore::Connect({absl::StrCat(kSlowHost, ":1"), "token",
                         absl::Seconds(30), absl::Milliseconds(500)});
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(store.status().message(),
                                "cannot reach the store server at "
                                "slow.distkit.test:1 within 500ms (cannot "
                                "resolve 'slow.distkit.test' within "))
      << store.status();
  EXPECT_LT(took, absl::Milliseconds(500) + Scaled(absl::Seconds(1))) << took;
  EXPECT_TRUE(SlowLookupsFinished(before + 1));
}

TEST(ResolveTest, ASlowLookupThatAnswersInTimeConnects) {
  const int before = SlowLookupsReturned();
  std::pair<store_socket::Fd, int> listening = ListenOnLoopback();
  absl::StatusOr<store_socket::Fd> fd = store_socket::ConnectBefore(
      absl::StrCat(kSlowHost, ":", listening.second),
      absl::Now() + kSlowLookup + Scaled(absl::Seconds(10)));
  EXPECT_TRUE(fd.ok()) << fd.status();
  EXPECT_TRUE(SlowLookupsFinished(before + 1));
  // Looked up on a thread other than the caller's.
  absl::MutexLock lock(&mu);
  EXPECT_NE(last_slow_tid, gettid());
}

TEST(ResolveTest, ANameThatDoesNotResolveIsNamed) {
  absl::StatusOr<store_socket::Fd> fd = store_socket::ConnectBefore(
      absl::StrCat(kMissingHost, ":1"), absl::Now() + absl::Milliseconds(200));
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(fd.status().message(),
                                "cannot resolve 'missing.distkit.test': "))
      << fd.status();
}

TEST(ResolveTest, LiteralAddressesAndLocalhostResolveOnTheCallersThread) {
  std::pair<store_socket::Fd, int> listening = ListenOnLoopback();
  for (const char* host : {"127.0.0.1", "localhost"}) {
    {
      absl::MutexLock lock(&mu);
      last_other_tid = 0;
    }
    absl::StatusOr<store_socket::Fd> fd =
        store_socket::ConnectBefore(absl::StrCat(host, ":", listening.second),
                                    absl::Now() + Scaled(absl::Seconds(10)));
    EXPECT_TRUE(fd.ok()) << host << ": " << fd.status();
    absl::MutexLock lock(&mu);
    EXPECT_EQ(last_other_tid, gettid()) << host;
  }
  absl::StatusOr<std::pair<store_socket::Fd, int>> on_localhost =
      store_socket::Listen("localhost", 0);
  EXPECT_TRUE(on_localhost.ok()) << on_localhost.status();
}

}  // namespace
}  // namespace distkit
