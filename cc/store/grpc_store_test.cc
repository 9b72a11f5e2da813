#include "cc/store/grpc_store.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cc/store/call_deadline.h"
#include "cc/store/hash_store.h"
#include "cc/store/internal/grpc_status.h"
#include "cc/store/request_limits.h"
#include "cc/store/store.grpc.pb.h"
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

TEST_F(GrpcStoreTest, NonUtf8KeyIsInvalidArgumentWithAReason) {
  std::shared_ptr<Store> client = Client();
  const std::string bad("k\xff\xfe", 3);
  absl::Status s = client->Set(bad, "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("not valid UTF-8"), absl::string_view::npos) << s;
  EXPECT_EQ(client->Get(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->MultiSet({"ok", bad}, {"1", "2"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(*client->Check({"ok"}));  // nothing of the batch was set
  EXPECT_TRUE(client->Set("caf\xc3\xa9", "v").ok());  // valid UTF-8 is fine
}

// BUILD sets DISTKIT_STORE_MAX_REQUEST_BYTES to 4 MiB for this binary.
TEST_F(GrpcStoreTest, OversizedRequestIsRefusedBeforeItIsSent) {
  ASSERT_EQ(MaxStoreRequestBytes(), size_t{4} << 20);
  std::shared_ptr<Store> client = Client();
  const std::string big((size_t{4} << 20) + 1, 'x');
  absl::Status s = client->Set("big", big);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("DISTKIT_STORE_MAX_REQUEST_BYTES"),
            absl::string_view::npos);
  EXPECT_FALSE(*client->Check({"big"}));
  EXPECT_TRUE(client->Set("fits", std::string(size_t{1} << 20, 'y')).ok());
}

TEST_F(GrpcStoreTest, ServerRefusesAnOversizedRequestFromAnyClient) {
  // A client that skips the checks (another implementation, or a hostile
  // one) is cut off by the server: without the token before its body is
  // read, with it by the server's own size limit.
  auto channel = grpc::CreateChannel(server->address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = store::StoreService::NewStub(channel);
  store::SetRequest req;
  req.set_key("big");
  req.set_value(std::string(size_t{8} << 20, 'x'));
  for (const char* token : {"not-the-token", kToken}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata(store_internal::kTokenMetadataKey, token);
    store::SetResponse resp;
    grpc::Status s = stub->Set(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), token == kToken
                                  ? grpc::StatusCode::RESOURCE_EXHAUSTED
                                  : grpc::StatusCode::UNAUTHENTICATED)
        << token << ": " << s.error_message();
  }
  EXPECT_FALSE(*Client()->Check({"big"}));
}

TEST_F(GrpcStoreTest, StoreDeadlineBoundsEveryCall) {
  std::shared_ptr<Store> client = Client(kToken, absl::Seconds(60));
  const absl::Time start = absl::Now();
  {
    ScopedStoreDeadline budget(absl::Now() + absl::Milliseconds(800));
    absl::StatusOr<std::string> v = client->Get("never_set");
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded)
        << v.status();
    // The server's answer (naming the key) arrives before the RPC deadline.
    EXPECT_NE(v.status().message().find("never_set"), absl::string_view::npos)
        << v.status();
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(StoreCallDeadline(), absl::InfiniteFuture());
}

// Starts `grpc_store_test --serve` in a child process (with `env` set there)
// and returns its pid and the address it serves.
std::pair<pid_t, std::string> StartStoreHost(
    const std::vector<std::pair<std::string, std::string>>& env = {}) {
  int pipe_fds[2];
  EXPECT_EQ(pipe(pipe_fds), 0);
  pid_t host = fork();
  EXPECT_GE(host, 0);
  if (host == 0) {
    for (const auto& [name, value] : env)
      setenv(name.c_str(), value.c_str(), 1);
    dup2(pipe_fds[1], 1);
    execl("/proc/self/exe", "grpc_store_test", "--serve",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(pipe_fds[1]);
  char line[128] = {};
  FILE* from_host = fdopen(pipe_fds[0], "r");
  EXPECT_NE(fgets(line, sizeof(line), from_host), nullptr);
  fclose(from_host);
  std::string address(line);
  while (!address.empty() && address.back() == '\n') address.pop_back();
  return {host, address};
}

// A process's peak resident memory (VmHWM), in bytes.
int64_t PeakRssBytes(pid_t pid) {
  FILE* f = fopen(absl::StrCat("/proc/", pid, "/status").c_str(), "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kib = -1;
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  }
  fclose(f);
  return kib * 1024;
}

// The token is checked from the metadata before the body is read: a large
// request with a wrong token is refused without the store host ever
// buffering it (its peak memory grows by far less than one body), and the
// client hears so at once instead of after uploading everything.
TEST(GrpcStoreTokenFirstTest, WrongTokenBodyIsNeverBuffered) {
  constexpr size_t kBody = size_t{192} << 20;
  auto [host, address] = StartStoreHost(
      {{"DISTKIT_STORE_MAX_REQUEST_BYTES", std::to_string(size_t{1} << 30)}});
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = store::StoreService::NewStub(channel);
  {
    // Warm the connection, so what follows measures only the body.
    grpc::ClientContext ctx;
    ctx.AddMetadata(store_internal::kTokenMetadataKey, kToken);
    store::NumKeysRequest req;
    store::NumKeysResponse resp;
    ASSERT_TRUE(stub->NumKeys(&ctx, req, &resp).ok());
  }
  const int64_t before = PeakRssBytes(host);
  ASSERT_GT(before, 0);
  store::SetRequest req;
  req.set_key("big");
  req.set_value(std::string(kBody, 'x'));
  for (const char* token : {"not-the-token", ""}) {
    grpc::ClientContext ctx;
    if (*token) ctx.AddMetadata(store_internal::kTokenMetadataKey, token);
    store::SetResponse resp;
    grpc::Status s = stub->Set(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s.error_message();
  }
  const int64_t growth = PeakRssBytes(host) - before;
  // Two refused bodies of 192 MiB; before the token was checked first the
  // host grew by about 600 MiB. The margin covers sanitizer shadow memory.
  EXPECT_LT(growth, int64_t{64} << 20)
      << "the store host buffered " << growth << " bytes of refused bodies";
  // The same body with the token is stored (the host's limit is 1 GiB).
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata(store_internal::kTokenMetadataKey, kToken);
    store::SetResponse resp;
    grpc::Status s = stub->Set(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  absl::StatusOr<std::unique_ptr<GrpcStore>> good = GrpcStore::Connect(
      {address, kToken, absl::Seconds(30), absl::Seconds(10)});
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_TRUE(*(*good)->Check({"big"}));
  kill(host, SIGKILL);
  int status = 0;
  waitpid(host, &status, 0);
}

// A store host that freezes (SIGSTOP) answers nothing; every call fails
// within its deadline: the store timeout, or a shorter ScopedStoreDeadline.
TEST(GrpcStoreFrozenHostTest, EveryCallFailsWithinItsDeadline) {
  auto [host, address] = StartStoreHost();
  absl::StatusOr<std::unique_ptr<GrpcStore>> c = GrpcStore::Connect(
      {address, kToken, absl::Seconds(2), absl::Seconds(10)});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->Set("k", "v").ok());
  ASSERT_EQ(kill(host, SIGSTOP), 0);
  absl::Time start = absl::Now();
  absl::Status s = (*c)->Set("k", "v2");
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  start = absl::Now();
  {
    ScopedStoreDeadline budget(absl::Now() + absl::Milliseconds(500));
    EXPECT_FALSE((*c)->Check({"k"}).ok());
    EXPECT_FALSE((*c)->Get("k").ok());
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  kill(host, SIGKILL);
  int status = 0;
  waitpid(host, &status, 0);
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--serve") {
    absl::StatusOr<std::unique_ptr<distkit::StoreServer>> s =
        distkit::StoreServer::Start({"127.0.0.1:0", distkit::kToken});
    if (!s.ok()) return 2;
    printf("%s\n", (*s)->address().c_str());
    fflush(stdout);
    pause();
    return 0;
  }
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
