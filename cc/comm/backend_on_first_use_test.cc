#include "cc/comm/backend_on_first_use.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "cc/comm/forwarding_backend.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// A backend that only counts its aborts (these tests move no data).
class CountingBackend : public ForwardingBackend {
 public:
  explicit CountingBackend(std::atomic<int>* aborts) : aborts_(aborts) {}
  absl::string_view name() const override { return "counting"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void Abort() override { aborts_->fetch_add(1); }

 protected:
  Backend* ForwardTo(const TensorRef&) const override { return nullptr; }

 private:
  std::atomic<int>* aborts_;
};

TEST(BackendOnFirstUse, MadeOnceByTheFirstOfManyThreads) {
  std::atomic<int> made{0}, aborts{0};
  BackendOnFirstUse lazy([&]() -> absl::StatusOr<std::unique_ptr<Backend>> {
    made.fetch_add(1);
    return std::unique_ptr<Backend>(new CountingBackend(&aborts));
  });
  EXPECT_FALSE(lazy.made());
  EXPECT_EQ(made.load(), 0);
  std::vector<Backend*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<Backend*> b = lazy.Get();
      if (b.ok()) seen[i] = *b;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(made.load(), 1);
  EXPECT_TRUE(lazy.made());
  ASSERT_NE(seen[0], nullptr);
  for (Backend* b : seen) EXPECT_EQ(b, seen[0]);
  EXPECT_EQ(seen[0]->name(), "counting");
}

TEST(BackendOnFirstUse, AFailureIsEveryCallsAnswerAndIsNotRetried) {
  int calls = 0;
  BackendOnFirstUse lazy([&]() -> absl::StatusOr<std::unique_ptr<Backend>> {
    ++calls;
    return absl::UnavailableError("gloo: rank 1 could not listen");
  });
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Backend*> b = lazy.Get();
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(b.status().message(), "gloo: rank 1 could not listen");
  }
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(lazy.made());
}

TEST(BackendOnFirstUse, AbortBeforeUseRefusesWithoutMakingIt) {
  int calls = 0;
  std::atomic<int> aborts{0};
  BackendOnFirstUse lazy([&]() -> absl::StatusOr<std::unique_ptr<Backend>> {
    ++calls;
    return std::unique_ptr<Backend>(new CountingBackend(&aborts));
  });
  lazy.Abort();
  absl::StatusOr<Backend*> b = lazy.Get();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kCancelled);
  EXPECT_NE(b.status().message().find("aborted"), absl::string_view::npos);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(aborts.load(), 0);
}

TEST(BackendOnFirstUse, AbortAfterUseAbortsTheBackend) {
  std::atomic<int> aborts{0};
  BackendOnFirstUse lazy([&]() -> absl::StatusOr<std::unique_ptr<Backend>> {
    return std::unique_ptr<Backend>(new CountingBackend(&aborts));
  });
  ASSERT_TRUE(lazy.Get().ok());
  lazy.Abort();
  EXPECT_EQ(aborts.load(), 1);
}

}  // namespace
}  // namespace distkit
