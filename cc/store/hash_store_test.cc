#include "cc/store/hash_store.h"

#include "cc/store/prefix_store.h"
#include "cc/store/store_conformance.h"

namespace distkit {
namespace {

// One shared store per test, so another_client() reaches the same data.
std::shared_ptr<HashStore> current;

INSTANTIATE_TEST_SUITE_P(
    InProcess, StoreConformanceTest,
    ::testing::Values(
        StoreFactory{"HashStore",
                     [] { return current = std::make_shared<HashStore>(); },
                     [] { return current; }},
        StoreFactory{
            "PrefixStore",
            [] {
              current = std::make_shared<HashStore>();
              return std::make_shared<PrefixStore>("group7", current);
            },
            [] { return std::make_shared<PrefixStore>("group7", current); }}),
    StoreFactoryName);

TEST(PrefixStoreTest, NamespacesDoNotCollide) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  ASSERT_TRUE(a.Set("k", "from a").ok());
  ASSERT_TRUE(b.Set("k", "from b").ok());
  EXPECT_EQ(*a.Get("k"), "from a");
  EXPECT_EQ(*b.Get("k"), "from b");
  EXPECT_EQ(*base->Get("a/k"), "from a");
  EXPECT_EQ(*a.NumKeys(), 2);  // c10d: counts the whole store.
  PrefixStore nested("inner", std::make_shared<PrefixStore>("outer", base));
  ASSERT_TRUE(nested.Set("x", "1").ok());
  EXPECT_TRUE(*base->Check({"outer/inner/x"}));
}

TEST(HashStoreTest, CancelledWaitReturnsPromptly) {
  HashStore store;
  std::atomic<bool> gone{false};
  std::thread t([&] {
    absl::SleepFor(absl::Milliseconds(150));
    gone = true;
  });
  const absl::Time start = absl::Now();
  absl::Status s =
      store.WaitFor({"k"}, absl::Seconds(30), [&] { return gone.load(); });
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

}  // namespace
}  // namespace distkit
