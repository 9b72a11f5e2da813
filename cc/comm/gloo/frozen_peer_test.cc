// A peer that published its pair's address but never completes the
// connection (frozen), met by two sends at once on a group that connects on
// demand: each lane gives up at its deadline with an error naming the peer,
// and the pair is made once. Before, the second lane, waiting for the
// peer's lock while the first gave up, made the pair again, and Gloo's
// createPair destroyed the old one under the thread still connecting it (a
// use after free; the store then held a second address of this rank's).
// Also: CANCELLED after an abort names the rank and the group.

#include <arpa/inet.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cc/comm/gloo/gloo_backend.h"
#include "cc/comm/op_signature.h"
#include "cc/store/hash_store.h"
#include "gtest/gtest.h"
#include "testing/cc/time_scale.h"

namespace distkit {
namespace {

using ::distkit::testing::Scaled;

// A listening socket on `ip` that accepts (through the kernel's backlog)
// and never speaks.
class SilentListener {
 public:
  explicit SilentListener(const char* ip) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    inet_pton(AF_INET, ip, &addr.sin_addr);
    ok_ = fd_ >= 0 &&
          bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          listen(fd_, 8) == 0;
    socklen_t len = sizeof(ss_);
    ok_ = ok_ && getsockname(fd_, reinterpret_cast<sockaddr*>(&ss_), &len) == 0;
  }
  ~SilentListener() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }
  // What a Gloo pair publishes: this socket's address and a sequence
  // number.
  std::string PairAddress() const {
    std::vector<char> bytes = gloo::transport::tcp::Address(ss_, 0).bytes();
    return std::string(bytes.begin(), bytes.end());
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
  sockaddr_storage ss_{};
};

TEST(FrozenPeerTest, ConcurrentSendsFailOnceAndNeverRemakeThePair) {
  // 127.0.0.2 orders above this rank's 127.0.0.1: this rank's pair is the
  // listening side and waits for the peer to connect, which it never does
  // (Gloo waits 5 times the pair's 60 s; the operations allow 200 ms).
  SilentListener peer("127.0.0.2");
  ASSERT_TRUE(peer.ok()) << "cannot listen on 127.0.0.2";
  auto store = std::make_shared<HashStore>();
  ASSERT_TRUE(store->Set("pair/1/0", peer.PairAddress()).ok());

  GlooBackend::Options options;
  options.hostname = "127.0.0.1";
  options.timeout = absl::Seconds(60);
  options.connect_on_demand = true;
  absl::StatusOr<std::unique_ptr<GlooBackend>> backend =
      GlooBackend::Create(store, /*rank=*/0, /*size=*/2, options);
  ASSERT_TRUE(backend.ok()) << backend.status();

  constexpr int kLanes = 2;
  absl::Status status[kLanes];
  absl::Duration took[kLanes];
  std::vector<std::thread> lanes;
  for (int lane = 0; lane < kLanes; ++lane) {
    lanes.emplace_back([&, lane] {
      OpContext ctx;
      ctx.op = OpCode::kSend;
      ctx.seq = lane + 1;
      ctx.group_name = "frozen";
      ctx.timeout = absl::Milliseconds(200);
      int32_t value = lane;
      const absl::Time start = absl::Now();
      status[lane] = (*backend)->Send(
          ctx, TensorRef(&value, 1, DataType::kInt32), /*dst=*/1,
          /*tag=*/lane + 1);
      took[lane] = absl::Now() - start;
    });
  }
  // The first address this rank published for the pair.
  absl::StatusOr<std::string> published =
      store->Get("pair/0/1", absl::Seconds(30));
  for (std::thread& t : lanes) t.join();
  ASSERT_TRUE(published.ok()) << published.status();

  for (int lane = 0; lane < kLanes; ++lane) {
    SCOPED_TRACE(absl::StrCat("lane ", lane));
    EXPECT_EQ(status[lane].code(), absl::StatusCode::kDeadlineExceeded)
        << status[lane];
    EXPECT_TRUE(absl::StrContains(status[lane].message(), "rank 1"))
        << status[lane];
    EXPECT_TRUE(absl::StrContains(status[lane].message(), "handshake"))
        << status[lane];
    // 200 ms each, the second lane's spent waiting for the first's; not a
    // second handshake of its own.
    EXPECT_LT(took[lane], Scaled(absl::Seconds(3))) << status[lane];
  }
  // The pair was made once: no second address of this rank's.
  absl::StatusOr<std::string> now = store->Get("pair/0/1", absl::Seconds(1));
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(*now, *published) << "the pair to rank 1 was made again";

  // Every later use gets the first error too, at once.
  OpContext ctx;
  ctx.op = OpCode::kRecv;
  ctx.seq = 3;
  ctx.group_name = "frozen";
  ctx.timeout = absl::Seconds(30);
  int32_t value = 0;
  const absl::Time start = absl::Now();
  absl::Status later = (*backend)->Recv(
      ctx, TensorRef(&value, 1, DataType::kInt32), /*src=*/1, /*tag=*/7);
  EXPECT_LT(absl::Now() - start, Scaled(absl::Seconds(2))) << later;
  EXPECT_EQ(later.code(), absl::StatusCode::kDeadlineExceeded) << later;
  EXPECT_TRUE(absl::StrContains(later.message(), "rank 1")) << later;
  EXPECT_TRUE(absl::StrContains(later.message(), "failed earlier")) << later;
}

// CANCELLED after Abort() names the operation, its group and the rank, as
// the backend's other errors do.
TEST(FrozenPeerTest, CancelledNamesRankAndGroup) {
  GlooBackend::Options options;
  options.hostname = "127.0.0.1";
  options.timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<GlooBackend>> backend = GlooBackend::Create(
      std::make_shared<HashStore>(), /*rank=*/0, /*size=*/1, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  (*backend)->Abort();
  OpContext ctx;
  ctx.op = OpCode::kBarrier;
  ctx.seq = 4;
  ctx.group_name = "frozen";
  OpSignature mine;
  std::vector<OpSignature> all(1);
  absl::Status status = (*backend)->ExchangeSignatures(
      ctx, mine, InlinePayload{}, absl::MakeSpan(all));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "group 'frozen'")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "(rank 0")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "aborted")) << status;
}

}  // namespace
}  // namespace distkit
