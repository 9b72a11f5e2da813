#include "cc/store/grpc_store.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "cc/store/hash_store.h"
#include "cc/store/store_conformance.h"
#include "cc/store/store_server.h"

namespace distkit {
namespace {

constexpr char kToken[] = "job-token-42";

std::unique_ptr<StoreServer> server;

std::shared_ptr<Store> Client(const std::string& token = kToken,
                              absl::Duration timeout = absl::Seconds(30)) {
  absl::StatusOr<std::unique_ptr<GrpcStore>> c = GrpcStore::Connect(
      {server->address(), token, timeout, absl::Seconds(10)});
  EXPECT_TRUE(c.ok()) << c.status();
  return std::shared_ptr<Store>(std::move(*c));
}

INSTANTIATE_TEST_SUITE_P(
    Grpc, StoreConformanceTest,
    ::testing::Values(StoreFactory{
        "GrpcStore",
        [] {
          server.reset();
          server = *StoreServer::Start({"127.0.0.1:0", kToken});
          return Client();
        },
        [] { return Client(); }}),
    StoreFactoryName);

class GrpcStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server.reset();
    absl::StatusOr<std::unique_ptr<StoreServer>> s =
        StoreServer::Start({"127.0.0.1:0", kToken});
    ASSERT_TRUE(s.ok()) << s.status();
    server = *std::move(s);
  }
};

TEST_F(GrpcStoreTest, BindsOnlyTheGivenAddress) {
  EXPECT_EQ(server->address(), absl::StrCat("127.0.0.1:", server->port()));
  EXPECT_GT(server->port(), 0);
  // The same port a second time is refused, not shared.
  absl::StatusOr<std::unique_ptr<StoreServer>> second =
      StoreServer::Start({server->address(), kToken});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
      << second.status();
  EXPECT_FALSE(StoreServer::Start({"no-port", kToken}).ok());
}

TEST_F(GrpcStoreTest, WrongTokenIsRefusedAndChangesNothing) {
  std::shared_ptr<Store> good = Client();
  ASSERT_TRUE(good->Set("k", "original").ok());
  std::shared_ptr<Store> bad = Client("not-the-token");
  absl::Status s = bad->Set("k", "overwritten");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_NE(s.message().find("wrong job token"), absl::string_view::npos) << s;
  EXPECT_EQ(bad->Add("n", 1).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(bad->Get("k").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(bad->DeleteKey("k").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(bad->Append("k", "x").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(bad->MultiSet({"k"}, {"x"}).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(bad->CompareSet("k", "original", "x").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(bad->NumKeys().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(*good->Get("k"), "original");
  EXPECT_FALSE(*good->Check({"n"}));
  EXPECT_EQ(*good->NumKeys(), 1);
}

TEST_F(GrpcStoreTest, MissingTokenIsRefused) {
  std::shared_ptr<Store> none = Client("");
  absl::Status s = none->Set("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_NE(s.message().find("no job token"), absl::string_view::npos) << s;
}

TEST_F(GrpcStoreTest, SixtyFourClientsLoseNoAdd) {
  constexpr int kClients = 64;
  constexpr int kAddsEach = 1000;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(Client());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < kAddsEach; ++j) {
        if (!clients[i]->Add("total", 1).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(*clients[0]->Add("total", 0), kClients * kAddsEach);
}

TEST_F(GrpcStoreTest, ClientDyingMidWaitDoesNotHurtTheServer) {
  const std::string address = server->address();
  // A separate process (this binary, re-executed) blocks in Get and is
  // killed while waiting. fork() alone is unsafe once gRPC has threads.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    execl("/proc/self/exe", "grpc_store_test", "--blocked-client",
          address.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::shared_ptr<Store> client = Client();
  ASSERT_TRUE(client->Wait({"child_waiting"}, absl::Seconds(20)).ok());
  absl::SleepFor(absl::Milliseconds(200));  // let the child block in Get
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  // The server keeps serving, and the dead client's wait does not pin it.
  ASSERT_TRUE(client->Set("after", "ok").ok());
  EXPECT_EQ(*client->Get("after"), "ok");
  EXPECT_EQ(*client->Add("n", 2), 2);
  const absl::Time start = absl::Now();
  server->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(GrpcStoreTest, ConnectTimesOutNamingTheAddress) {
  const std::string address = server->address();
  server.reset();  // nothing listens there now
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<GrpcStore>> c = GrpcStore::Connect(
      {address, kToken, absl::Seconds(1), absl::Milliseconds(500)});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded)
      << c.status();
  EXPECT_NE(c.status().message().find(address), absl::string_view::npos);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(GrpcStoreTest, ClientStartedBeforeServerConnects) {
  const int port = server->port();
  const std::string address = server->address();
  server.reset();
  std::thread starter([&] {
    absl::SleepFor(absl::Milliseconds(500));
    server = *StoreServer::Start({address, kToken});
  });
  absl::StatusOr<std::unique_ptr<GrpcStore>> c = GrpcStore::Connect(
      {address, kToken, absl::Seconds(5), absl::Seconds(10)});
  starter.join();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(server->port(), port);
  EXPECT_TRUE((*c)->Set("k", "v").ok());
}

TEST_F(GrpcStoreTest, ServerGoneIsAnErrorNotAHang) {
  std::shared_ptr<Store> client = Client(kToken, absl::Seconds(1));
  ASSERT_TRUE(client->Set("k", "v").ok());
  server->Shutdown();
  const absl::Time start = absl::Now();
  absl::Status s = client->Set("k", "v2");
  EXPECT_FALSE(s.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--blocked-client") {
    absl::StatusOr<std::unique_ptr<distkit::GrpcStore>> c =
        distkit::GrpcStore::Connect(
            {argv[2], distkit::kToken, absl::Seconds(120), absl::Seconds(10)});
    if (!c.ok()) return 2;
    (void)(*c)->Set("child_waiting", "1");
    (void)(*c)->Get("never_set");
    return 3;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
