#include "cc/comm/gloo/listen_address.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Matcher;

// The choice for a store at `store` succeeds with `address`, for a reason
// that matches `reason`.
void ExpectChosen(const std::string& store, const std::string& address,
                  const Matcher<const std::string&>& reason) {
  absl::StatusOr<ListenAddress> a = ChooseListenAddress(store);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->address, address);
  EXPECT_THAT(a->reason, reason);
}

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
  ASSERT_NO_FATAL_FAILURE(
      ExpectChosen("127.0.0.1:29500", "127.0.0.1",
                   HasSubstr("routes to the store at 127.0.0.1:29500")));
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
  ExpectChosen("0.0.0.0:4000", "127.0.0.1",
               HasSubstr("routes to MASTER_ADDR 127.0.0.9"));
}

TEST_F(ListenAddressTest, NothingToRouteToFallsBackToTheHostName) {
  // Nothing to route to: the host's name, as the last resort.
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  ExpectChosen("0.0.0.0:4000", host, _);
}

TEST_F(ListenAddressTest, AnInterfaceByName) {
  setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  ASSERT_NO_FATAL_FAILURE(
      ExpectChosen("192.0.2.1:1", "127.0.0.1", "GLOO_SOCKET_IFNAME=lo"));
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
  ExpectChosen("127.0.0.1:1", "10.1.2.3", "DISTKIT_GLOO_HOSTNAME");
}

}  // namespace
}  // namespace distkit
