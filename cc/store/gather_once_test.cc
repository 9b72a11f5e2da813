#include "cc/store/gather_once.h"

#include <atomic>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/store/hash_store.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// Ranks 0 .. size-1.
std::vector<int> AllRanks(int size) {
  std::vector<int> ranks(size);
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

// Runs `rank(r)` for each of `ranks` on a thread of its own (the ranks of a
// job, on one in-process store) and waits for them all.
void RunRanks(const std::vector<int>& ranks,
              const std::function<void(int)>& rank) {
  std::vector<std::thread> threads;
  for (int r : ranks) threads.emplace_back([&rank, r] { rank(r); });
  for (std::thread& t : threads) t.join();
}

// Ranks as threads on one in-process store: every rank gets the same
// combination of every rank's value, computed exactly once.
TEST(GatherOnceTest, EveryRankGetsOneCombinationOfAll) {
  for (int size : {1, 2, 7, 64}) {
    HashStore store;
    std::atomic<int> combined{0};
    std::vector<std::string> got(size);
    std::vector<absl::Status> errors(size);
    RunRanks(AllRanks(size), [&](int r) {
      absl::StatusOr<std::string> all = GatherOnce(
          store, "v/", "value", r, size, absl::StrCat("r", r * r),
          [&](const std::vector<std::string>& values) {
            combined.fetch_add(1);
            return absl::StrJoin(values, "|");
          },
          absl::Seconds(30));
      if (all.ok()) {
        got[r] = *all;
      } else {
        errors[r] = all.status();
      }
    });
    std::vector<std::string> want;
    for (int r = 0; r < size; ++r) want.push_back(absl::StrCat("r", r * r));
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(errors[r].ok())
          << "size " << size << " rank " << r << ": " << errors[r];
      EXPECT_EQ(got[r], absl::StrJoin(want, "|")) << "size " << size;
    }
    EXPECT_EQ(combined.load(), 1) << "size " << size;
    // Each rank's own key stays, for diagnosis.
    for (int r = 0; r < size; ++r) {
      absl::StatusOr<std::string> mine =
          store.Get(absl::StrCat("v/", r), absl::ZeroDuration());
      ASSERT_TRUE(mine.ok()) << mine.status();
      EXPECT_EQ(*mine, want[r]);
    }
  }
}

// A rank that never comes: the others time out, and the message names the
// missing rank's key (rank 0's, as a wait on every key does; the others',
// from a wait of no time on them).
TEST(GatherOnceTest, AMissingRankIsNamedWhenTheWaitTimesOut) {
  HashStore store;
  const int size = 3;
  std::vector<absl::Status> errors(size);
  RunRanks({0, 2}, [&](int r) {  // rank 1 never arrives
    errors[r] = GatherOnce(
                    store, "host/", "host identity", r, size, "h",
                    [](const std::vector<std::string>&) { return "x"; },
                    absl::Milliseconds(200))
                    .status();
  });
  for (int r : {0, 2}) {
    EXPECT_EQ(errors[r].code(), absl::StatusCode::kDeadlineExceeded);
    const std::string msg(errors[r].message());
    EXPECT_TRUE(absl::StrContains(msg, "\"host/1\"")) << msg;
    EXPECT_FALSE(absl::StrContains(msg, "\"host/0\"")) << msg;
    EXPECT_FALSE(absl::StrContains(msg, "\"host/2\"")) << msg;
  }
  // Rank 0's message says what was gathered, as the others' do.
  for (int r : {0, 2}) {
    const std::string msg(errors[r].message());
    EXPECT_TRUE(absl::StrContains(msg,
                                  "waiting for every rank's host identity: "
                                  "missing key(s) \"host/1\""))
        << "rank " << r << ": " << msg;
  }
}

// A store whose wait for several keys (rank 0's gather) fails at once, as
// a store that went away does.
class FailingMultiGetStore : public HashStore {
 public:
  absl::StatusOr<std::vector<std::string>> MultiGetWithTimeout(
      absl::Span<const std::string> keys, absl::Duration timeout) override {
    // One key: another rank's Get of the combined value.
    if (keys.size() == 1) return HashStore::MultiGetWithTimeout(keys, timeout);
    return absl::UnavailableError("the store's host went away");
  }
};

// Rank 0 fails before its wait could time out: the others learn it at once,
// with its code and its reason, instead of waiting out their own timeout.
TEST(GatherOnceTest, RankZerosFailureEndsTheOthersWaitsAtOnce) {
  FailingMultiGetStore store;
  const int size = 3;
  std::vector<absl::Status> errors(size);
  const absl::Time start = absl::Now();
  RunRanks(AllRanks(size), [&](int r) {
    errors[r] = GatherOnce(
                    store, "attached/", "answer", r, size, "1",
                    [](const std::vector<std::string>&) { return "1"; },
                    absl::Seconds(60))
                    .status();
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(errors[r].code(), absl::StatusCode::kUnavailable)
        << "rank " << r << ": " << errors[r];
    EXPECT_TRUE(
        absl::StrContains(errors[r].message(), "the store's host went away"))
        << "rank " << r << ": " << errors[r];
  }
  EXPECT_TRUE(absl::StrContains(errors[1].message(),
                                "rank 0 could not gather every rank's answer"))
      << errors[1];
}

// Rank 0 never comes: nobody combines, and the others say so.
TEST(GatherOnceTest, AMissingRankZeroIsNamedToo) {
  HashStore store;
  absl::Status error = GatherOnce(
                           store, "host/", "host identity", 1, 2, "h",
                           [](const std::vector<std::string>&) { return "x"; },
                           absl::Milliseconds(100))
                           .status();
  EXPECT_EQ(error.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(error.message(), "missing key(s) \"host/0\""))
      << error;
}

}  // namespace
}  // namespace distkit
