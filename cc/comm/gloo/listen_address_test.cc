#include "cc/comm/gloo/listen_address.h"

#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace distkit {
namespace {

// Each test starts with no address variable set.
class ListenAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"DISTKIT_GLOO_HOSTNAME", "DISTKIT_SOCKET_IFNAME",
                          "GLOO_SOCKET_IFNAME", "MASTER_ADDR"}) {
      unsetenv(v);
    }
  }
};

TEST_F(ListenAddressTest, TheStoresRouteOnLoopbackIsLoopback) {
  absl::StatusOr<ListenAddress> a = ChooseListenAddress("127.0.0.1:29500");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->address, "127.0.0.1");
  EXPECT_NE(a->reason.find("routes to the store at 127.0.0.1:29500"),
            std::string::npos)
      << a->reason;
  // The kernel's route, not a textual rule: loopback's routes leave from
  // lo's own address.
  EXPECT_EQ(ChooseListenAddress("127.0.0.5:1")->address, "127.0.0.1");
  EXPECT_EQ(ChooseListenAddress("[::1]:29500")->address, "::1");
  EXPECT_EQ(*RouteSourceAddress("127.0.0.1"), "127.0.0.1");
}

TEST_F(ListenAddressTest, AStoreInThisProcessIsLoopback) {
  EXPECT_EQ(ChooseListenAddress("")->address, "127.0.0.1");
}

TEST_F(ListenAddressTest, AWildcardStoreRoutesToMasterAddr) {
  // A server bound to 0.0.0.0 names no interface: MASTER_ADDR does.
  setenv("MASTER_ADDR", "127.0.0.9", 1);
  absl::StatusOr<ListenAddress> a = ChooseListenAddress("0.0.0.0:4000");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->address, "127.0.0.1");
  EXPECT_NE(a->reason.find("routes to MASTER_ADDR 127.0.0.9"),
            std::string::npos)
      << a->reason;
}

TEST_F(ListenAddressTest, NothingToRouteToFallsBackToTheHostName) {
  // Nothing to route to: the host's name, as the last resort.
  absl::StatusOr<ListenAddress> a = ChooseListenAddress("0.0.0.0:4000");
  ASSERT_TRUE(a.ok()) << a.status();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_EQ(a->address, host);
}

TEST_F(ListenAddressTest, AnInterfaceByName) {
  setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  absl::StatusOr<ListenAddress> a = ChooseListenAddress("192.0.2.1:1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->address, "127.0.0.1");
  EXPECT_EQ(a->reason, "GLOO_SOCKET_IFNAME=lo");
  // torch's list form: the first interface.
  setenv("GLOO_SOCKET_IFNAME", "lo,eth7", 1);
  EXPECT_EQ(ChooseListenAddress("192.0.2.1:1")->address, "127.0.0.1");
  // distkit's own variable comes first.
  setenv("DISTKIT_SOCKET_IFNAME", "no-such-if0", 1);
  absl::StatusOr<ListenAddress> missing = ChooseListenAddress("192.0.2.1:1");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find(
                "DISTKIT_SOCKET_IFNAME=no-such-if0: no interface named "
                "no-such-if0 (this host has: "),
            absl::string_view::npos)
      << missing.status();
  EXPECT_NE(missing.status().message().find("lo"), absl::string_view::npos);
}

TEST_F(ListenAddressTest, DistkitGlooHostnameOverridesEverything) {
  setenv("DISTKIT_SOCKET_IFNAME", "no-such-if0", 1);
  setenv("DISTKIT_GLOO_HOSTNAME", "10.1.2.3", 1);
  absl::StatusOr<ListenAddress> a = ChooseListenAddress("127.0.0.1:1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->address, "10.1.2.3");
  EXPECT_EQ(a->reason, "DISTKIT_GLOO_HOSTNAME");
}

}  // namespace
}  // namespace distkit
