#include "cc/group/flight_recorder.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/distrun/trace_summary.h"

namespace distkit {
namespace {

OpContext Ctx(uint64_t seq, OpCode op) {
  OpContext c;
  c.seq = seq;
  c.op = op;
  c.group_name = "world";
  return c;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(FlightRecorderTest, KeepsTheLastOperationsInOrder) {
  setenv("DISTKIT_FLIGHT_RECORDER_SIZE", "3", 1);
  FlightRecorder r("world", 0);
  unsetenv("DISTKIT_FLIGHT_RECORDER_SIZE");
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    uint64_t id = r.Begin(Ctx(seq, OpCode::kAllReduce), false);
    r.Describe(id, absl::StrCat("all_reduce #", seq, " float32 x4 op=sum"));
    if (seq < 5) r.End(id, absl::OkStatus());
  }
  const std::string text = r.Text();
  EXPECT_FALSE(absl::StrContains(text, "seq=2 ")) << text;  // ring of 3
  EXPECT_TRUE(absl::StrContains(text, "seq=3 ")) << text;
  EXPECT_TRUE(absl::StrContains(
      text, "seq=5 kind=collective op=all_reduce state=running"))
      << text;
  EXPECT_LT(text.find("seq=3 "), text.find("seq=5 ")) << "oldest first";
  EXPECT_TRUE(absl::StrContains(text, "call=\"all_reduce #4 float32 x4"));
  EXPECT_TRUE(absl::StrContains(r.ChromeTrace(), "\"ph\":\"X\""));
}

// Three ranks: 0 and 1 wait in all_reduce #5, rank 2 never entered it (its
// last op was all_reduce #4). The summary names rank 2 and what it did.
TEST(FlightRecorderTest, DistrunSummaryNamesTheRankThatNeverEntered) {
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/trace");
  ASSERT_EQ(system(absl::StrCat("mkdir -p ", dir).c_str()), 0);
  setenv("DISTKIT_TRACE_DIR", dir.c_str(), 1);
  const std::string timeline = absl::StrCat(getenv("TEST_TMPDIR"), "/tl");
  setenv("DISTKIT_TIMELINE", timeline.c_str(), 1);
  for (int rank = 0; rank < 3; ++rank) {
    FlightRecorder r("world", rank);
    const uint64_t last = rank == 2 ? 4 : 5;
    for (uint64_t seq = 1; seq <= last; ++seq) {
      uint64_t id = r.Begin(Ctx(seq, OpCode::kAllReduce), false);
      r.Describe(id, absl::StrCat("all_reduce #", seq, " float32 x4"));
      if (seq < 5) r.End(id, absl::OkStatus());
    }
    uint64_t p2p = r.Begin(Ctx(1, OpCode::kSend), true);
    r.End(p2p, absl::UnavailableError("peer gone"));
    const std::string where = r.Dump("all_reduce #5 timed out");
    EXPECT_EQ(where, absl::StrCat(dir, "/world.rank", rank, ".trace"));
    EXPECT_EQ(r.Dump("again"), "") << "a recorder dumps once";
  }
  unsetenv("DISTKIT_TRACE_DIR");
  unsetenv("DISTKIT_TIMELINE");
  EXPECT_TRUE(absl::StrContains(Read(dir + "/world.rank2.trace"),
                                "# all_reduce #5 timed out"));
  const std::string summary = SummarizeTraces(dir);
  EXPECT_TRUE(absl::StrContains(summary, "the latest collective is #5"))
      << summary;
  EXPECT_TRUE(absl::StrContains(summary,
                                "rank(s) 0, 1 entered it, rank(s) 2 "
                                "never did"))
      << summary;
  EXPECT_TRUE(absl::StrContains(summary,
                                "rank 2: never entered #5; last was "
                                "all_reduce #4 (done)"))
      << summary;
  EXPECT_TRUE(absl::StrContains(summary, "rank 0: in all_reduce #5 (running)"))
      << summary;
  const std::string merged = MergeTimelines(timeline);
  ASSERT_EQ(merged, timeline + ".json");
  const std::string json = Read(merged);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(absl::StrContains(json, absl::StrCat("\"pid\":", rank)))
        << json;
  }
  EXPECT_TRUE(absl::StartsWith(json, "{\"traceEvents\":[{"));
  EXPECT_EQ(SummarizeTraces(dir + "/none"), "");
}

}  // namespace
}  // namespace distkit
