// TakeRollCall when the store stops answering: a deadline late in the window
// gives the last complete poll (the store's host starved of CPU must not
// turn a known answer into "unknown"); with no complete poll it is an error.
#include "cc/group/agreement_roll_call.h"

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "cc/store/hash_store.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// Answers `answered` checks, then none (DEADLINE_EXCEEDED, as a client
// whose store deadline passed).
class StoppingStore : public HashStore {
 public:
  explicit StoppingStore(int answered) : answered_(answered) {}
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override {
    if (answered_-- <= 0) return absl::DeadlineExceededError("no answer");
    return HashStore::Check(keys);
  }

 private:
  int answered_;
};

TEST(RollCall, AStoreThatStopsAnsweringGivesTheLastCompletePoll) {
  // Three ranks: two complete polls (3 checks each), then one answered
  // check of the third poll and no more.
  StoppingStore store(3 + 3 + 1);
  ASSERT_TRUE(store.Set("diag/7/2", "all_reduce").ok());  // rank 2 is there
  absl::StatusOr<RollCall> call =
      TakeRollCall(store, "diag/7/", /*rank=*/0, /*size=*/3, "all_reduce",
                   absl::Now() + absl::Seconds(30), absl::Milliseconds(1));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(call->present, (std::vector<int>{0, 2}));
  EXPECT_EQ(call->absent, (std::vector<int>{1}));
}

TEST(RollCall, WithoutACompletePollWhoIsMissingIsUnknown) {
  StoppingStore store(2);  // the first poll is cut short
  absl::StatusOr<RollCall> call =
      TakeRollCall(store, "diag/7/", 0, 3, "all_reduce",
                   absl::Now() + absl::Seconds(30), absl::Milliseconds(1));
  EXPECT_EQ(call.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(RollCall, OtherErrorsAreNotPapered) {
  class FailingStore : public HashStore {
    absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override {
      if (++calls_ > 3) return absl::UnavailableError("connection reset");
      return HashStore::Check(keys);
    }
    int calls_ = 0;
  } store;
  absl::StatusOr<RollCall> call =
      TakeRollCall(store, "diag/7/", 0, 3, "all_reduce",
                   absl::Now() + absl::Seconds(30), absl::Milliseconds(1));
  EXPECT_EQ(call.status().code(), absl::StatusCode::kUnavailable);
}

// A rank that timed out after every rank's signature reached it knows that
// every rank joined: an absent rank finished (a successful call does not
// answer) or is stuck inside, never "never joined".
TEST(LateRanksMessage, AfterTheExchangeEveryRankReachedIt) {
  RollCall call{{0}, {1, 2}};
  const std::string m = LateRanksMessage(call, /*exchanged=*/true, "");
  EXPECT_EQ(m.find("never joined"), std::string::npos) << m;
  EXPECT_NE(m.find("every rank reached this operation"), std::string::npos)
      << m;
  EXPECT_NE(m.find("rank(s) 1, 2 did not answer"), std::string::npos) << m;
  EXPECT_NE(m.find("rank(s) 0 answered"), std::string::npos) << m;
}

TEST(LateRanksMessage, BeforeTheExchangeTheAbsentNeverJoined) {
  RollCall call{{0, 1}, {2}};
  EXPECT_EQ(
      LateRanksMessage(call, /*exchanged=*/false, "on host(s) node-b"),
      "; rank(s) 2 never joined it (on host(s) node-b; rank(s) 0, 1 did)");
  EXPECT_EQ(LateRanksMessage(call, /*exchanged=*/false, ""),
            "; rank(s) 2 never joined it (rank(s) 0, 1 did)");
}

}  // namespace
}  // namespace distkit
