// The Store contract as a parameterized test suite. Each Store implementation's
// test instantiates it with a factory:
//
//   INSTANTIATE_TEST_SUITE_P(Hash, StoreConformanceTest,
//                            ::testing::Values(StoreFactory{...}));

#ifndef DISTKIT_CC_STORE_STORE_CONFORMANCE_H_
#define DISTKIT_CC_STORE_STORE_CONFORMANCE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "cc/store/store.h"
#include "gtest/gtest.h"

namespace distkit {

struct StoreFactory {
  std::string name;
  // Returns a fresh, empty store; a second call on the same fixture returns a
  // second client of the same store.
  std::function<std::shared_ptr<Store>()> make;
  std::function<std::shared_ptr<Store>()> another_client;
};

inline std::string StoreFactoryName(
    const ::testing::TestParamInfo<StoreFactory>& info) {
  return info.param.name;
}

class StoreConformanceTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override { store_ = GetParam().make(); }
  std::shared_ptr<Store> store_;
};

TEST_P(StoreConformanceTest, SetThenGetReturnsLastValue) {
  ASSERT_TRUE(store_->Set("k", "v1").ok());
  ASSERT_TRUE(store_->Set("k", "v2").ok());
  absl::StatusOr<std::string> v = store_->Get("k");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "v2");
}

TEST_P(StoreConformanceTest, ValuesAreBinarySafe) {
  const std::string value("a\0b\xff\x01", 5);
  ASSERT_TRUE(store_->Set("bin", value).ok());
  EXPECT_EQ(*store_->Get("bin"), value);
  ASSERT_TRUE(store_->Set("empty", "").ok());
  EXPECT_EQ(*store_->Get("empty"), "");
}

TEST_P(StoreConformanceTest, GetTimesOutNamingTheKey) {
  const absl::Time start = absl::Now();
  absl::Status s = store_->Get("never", absl::Milliseconds(300)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("never\""), absl::string_view::npos) << s;
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_P(StoreConformanceTest, DefaultTimeoutIsTheStoreTimeout) {
  EXPECT_EQ(Store::kDefaultTimeout, absl::Seconds(300));
  store_->set_timeout(absl::Milliseconds(200));
  EXPECT_EQ(store_->Get("missing").status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(store_->Wait({"missing"}).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_P(StoreConformanceTest, AddIsACounter) {
  EXPECT_EQ(*store_->Add("c", 5), 5);
  EXPECT_EQ(*store_->Add("c", -2), 3);
  EXPECT_EQ(*store_->Get("c"), "3");
  ASSERT_TRUE(store_->Set("text", "abc").ok());
  absl::Status s = store_->Add("text", 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(*store_->Get("text"), "abc");
}

TEST_P(StoreConformanceTest, CompareSetFollowsC10d) {
  // Absent key, empty expected: set.
  EXPECT_EQ(*store_->CompareSet("cs", "", "one"), "one");
  // Wrong expected: unchanged, current value returned.
  EXPECT_EQ(*store_->CompareSet("cs", "zero", "two"), "one");
  EXPECT_EQ(*store_->Get("cs"), "one");
  // Right expected: swapped.
  EXPECT_EQ(*store_->CompareSet("cs", "one", "two"), "two");
  EXPECT_EQ(*store_->Get("cs"), "two");
  // Absent key, non-empty expected: nothing set, expected returned.
  EXPECT_EQ(*store_->CompareSet("absent", "x", "y"), "x");
  EXPECT_FALSE(*store_->Check({"absent"}));
}

TEST_P(StoreConformanceTest, WaitWakesWhenAnotherClientSets) {
  std::shared_ptr<Store> other = GetParam().another_client();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_TRUE(other->Set("late1", "a").ok());
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(other->Set("late2", "b").ok());
  });
  const absl::Time start = absl::Now();
  absl::Status s = store_->Wait({"late1", "late2"}, absl::Seconds(30));
  setter.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(*store_->Get("late2"), "b");
}

// A wait ends only when every key is present at once: a key that was there
// when it began and is deleted before the last one comes keeps it waiting.
TEST_P(StoreConformanceTest, WaitNoticesAKeyDeletedWhileItWaits) {
  std::shared_ptr<Store> other = GetParam().another_client();
  ASSERT_TRUE(store_->Set("wd_a", "1").ok());
  absl::Notification done;
  absl::Status s;
  std::thread waiter([&] {
    s = store_->Wait({"wd_a", "wd_b"}, absl::Seconds(5));
    done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_TRUE(*other->DeleteKey("wd_a"));
  ASSERT_TRUE(other->Set("wd_b", "2").ok());
  EXPECT_FALSE(done.WaitForNotificationWithTimeout(absl::Milliseconds(500)))
      << "the wait ended with wd_a deleted: " << s;
  ASSERT_TRUE(other->Set("wd_a", "3").ok());
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(4)));
  waiter.join();
  EXPECT_TRUE(s.ok()) << s;
}

TEST_P(StoreConformanceTest, GetWakesWhenAnotherClientSets) {
  std::shared_ptr<Store> other = GetParam().another_client();
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    ASSERT_TRUE(other->Set("later", "here").ok());
  });
  absl::StatusOr<std::string> v = store_->Get("later", absl::Seconds(30));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "here");
}

TEST_P(StoreConformanceTest, WaitTimeoutNamesOnlyMissingKeys) {
  ASSERT_TRUE(store_->Set("have", "1").ok());
  absl::Status s = store_->Wait({"have", "lack"}, absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("lack\""), absl::string_view::npos) << s;
  EXPECT_EQ(s.message().find("have\""), absl::string_view::npos) << s;
}

TEST_P(StoreConformanceTest, CheckDeleteAndCount) {
  const int64_t before = *store_->NumKeys();
  EXPECT_FALSE(*store_->Check({"a"}));
  ASSERT_TRUE(store_->Set("a", "1").ok());
  ASSERT_TRUE(store_->Set("b", "2").ok());
  EXPECT_TRUE(*store_->Check({"a", "b"}));
  EXPECT_FALSE(*store_->Check({"a", "zz"}));
  EXPECT_EQ(*store_->NumKeys(), before + 2);
  EXPECT_TRUE(*store_->DeleteKey("a"));
  EXPECT_FALSE(*store_->DeleteKey("a"));
  EXPECT_FALSE(*store_->Check({"a"}));
  EXPECT_EQ(*store_->NumKeys(), before + 1);
}

TEST_P(StoreConformanceTest, MultiSetMultiGetAppend) {
  ASSERT_TRUE(store_->MultiSet({"m1", "m2", "m3"}, {"x", "y", "z"}).ok());
  absl::StatusOr<std::vector<std::string>> v = store_->MultiGet({"m3", "m1"});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<std::string>{"z", "x"}));
  EXPECT_EQ(store_->MultiSet({"a"}, {"1", "2"}).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->Append("log", "ab").ok());
  ASSERT_TRUE(store_->Append("log", "cd").ok());
  EXPECT_EQ(*store_->Get("log"), "abcd");
}

TEST_P(StoreConformanceTest, ConcurrentAddsLoseNoUpdate) {
  constexpr int kThreads = 8;
  constexpr int kAddsEach = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      std::shared_ptr<Store> client = GetParam().another_client();
      for (int i = 0; i < kAddsEach; ++i) {
        ASSERT_TRUE(client->Add("counter", 1).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(*store_->Add("counter", 0), kThreads * kAddsEach);
}

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_STORE_CONFORMANCE_H_
