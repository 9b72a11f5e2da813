#include "cc/group/flight_recorder.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/cc/file_contents.h"
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

// A recorder made with DISTKIT_FLIGHT_RECORDER_SIZE=`size`.
std::unique_ptr<FlightRecorder> RecorderKeeping(const char* size) {
  setenv("DISTKIT_FLIGHT_RECORDER_SIZE", size, 1);
  auto r = std::make_unique<FlightRecorder>("world", 0);
  unsetenv("DISTKIT_FLIGHT_RECORDER_SIZE");
  return r;
}

TEST(FlightRecorderTest, KeepsTheLastOperationsInOrder) {
  const std::unique_ptr<FlightRecorder> r = RecorderKeeping("3");
  for (uint64_t seq = 1; seq <= 5; ++seq) {
    uint64_t id = r->Begin(Ctx(seq, OpCode::kAllReduce), false);
    r->Describe(id, absl::StrCat("all_reduce #", seq, " float32 x4 op=sum"));
    if (seq < 5) r->End(id, absl::OkStatus());
  }
  const std::string text = r->Text();
  EXPECT_FALSE(absl::StrContains(text, "seq=2 ")) << text;  // ring of 3
  EXPECT_TRUE(absl::StrContains(text, "seq=3 ")) << text;
  EXPECT_TRUE(absl::StrContains(
      text, "seq=5 kind=collective op=all_reduce state=running"))
      << text;
  EXPECT_LT(text.find("seq=3 "), text.find("seq=5 ")) << "oldest first";
  EXPECT_TRUE(absl::StrContains(text, "call=\"all_reduce #4 float32 x4"));
  EXPECT_TRUE(absl::StrContains(r->ChromeTrace(), "\"ph\":\"X\""));
}

// Collectives and sends/receives are kept apart, the last N of each, and
// written oldest first together.
TEST(FlightRecorderTest, KeepsTheLastOfEachKind) {
  const std::unique_ptr<FlightRecorder> r = RecorderKeeping("2");
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    uint64_t id = r->Begin(Ctx(seq, OpCode::kBroadcast), false);
    OpSignature sig;
    sig.op = static_cast<uint32_t>(OpCode::kBroadcast);
    sig.seq = seq;
    sig.dtype = static_cast<int32_t>(DataType::kInt64);
    sig.root = 1;
    sig.count = 7;
    r->Describe(id, sig);
    r->End(id, absl::OkStatus());
  }
  const uint64_t send = r->Begin(Ctx(1, OpCode::kSend), true);
  r->Describe(send, "send #1 to rank 1");
  r->End(send, absl::UnavailableError("peer gone"));
  const std::string text = r->Text();
  EXPECT_FALSE(absl::StrContains(text, "seq=2 ")) << text;
  EXPECT_TRUE(
      absl::StrContains(text, "seq=3 kind=collective op=broadcast state=done"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "call=\"broadcast #4 int64 x7 root=1\""))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "seq=1 kind=p2p op=send state=failed"))
      << text;
  EXPECT_TRUE(
      absl::StrContains(text, "call=\"send #1 to rank 1\" error=\"peer gone\""))
      << text;
  EXPECT_LT(text.find("seq=3 "), text.find("seq=4 ")) << text;
  EXPECT_LT(text.find("seq=4 "), text.find("kind=p2p")) << text;
}

// A dump while a collective thread writes: every line is one operation's
// (its seq and its signature's count agree), oldest first.
TEST(FlightRecorderTest, ReadsWhileOperationsRun) {
  const std::unique_ptr<FlightRecorder> r = RecorderKeeping("16");
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (uint64_t seq = 1; seq <= 500000; ++seq) {
      const uint64_t id = r->Begin(Ctx(seq, OpCode::kAllReduce), false);
      OpSignature sig;
      sig.op = static_cast<uint32_t>(OpCode::kAllReduce);
      sig.seq = seq;
      sig.dtype = static_cast<int32_t>(DataType::kFloat32);
      sig.count = static_cast<int64_t>(seq) * 3;
      r->Describe(id, sig);
      r->End(id, absl::OkStatus());
    }
    done = true;
  });
  int dumps = 0;
  while (!done) {
    const std::string text = r->Text();
    ++dumps;
    uint64_t last_seq = 0;
    for (absl::string_view line :
         absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      uint64_t seq = 0;
      int64_t count = -1;
      for (absl::string_view field : absl::StrSplit(line, ' ')) {
        // (EXPECT, not ASSERT: the writer thread must be joined.)
        if (absl::ConsumePrefix(&field, "seq=")) {
          EXPECT_TRUE(absl::SimpleAtoi(field, &seq)) << line;
        }
        if (absl::ConsumePrefix(&field, "x") &&
            absl::ConsumeSuffix(&field, "\"")) {
          EXPECT_TRUE(absl::SimpleAtoi(field, &count)) << line;
        }
      }
      if (count >= 0) {
        EXPECT_EQ(count, static_cast<int64_t>(seq) * 3) << line;
      }
      EXPECT_GT(seq, last_seq) << text;
      last_seq = seq;
    }
  }
  writer.join();
  EXPECT_GT(dumps, 0);
}

// Times: the kernel's coarse clock by default (its tick: within a few ms of
// now), the time-stamp counter when a timeline is asked for (within a few
// microseconds); an operation's end is never before its start.
TEST(FlightRecorderTest, TimesAreNowOnEitherClock) {
  for (bool timeline : {false, true}) {
    const char* tmp = getenv("TEST_TMPDIR");
    const std::string prefix = absl::StrCat(tmp ? tmp : "/tmp", "/times");
    if (timeline) setenv("DISTKIT_TIMELINE", prefix.c_str(), 1);
    FlightRecorder r("world", 0);
    unsetenv("DISTKIT_TIMELINE");
    const int64_t before = absl::ToUnixMicros(absl::Now());
    uint64_t id = r.Begin(Ctx(1, OpCode::kAllReduce), false);
    absl::SleepFor(absl::Milliseconds(20));
    r.End(id, absl::OkStatus());
    const int64_t after = absl::ToUnixMicros(absl::Now());
    const std::string text = r.Text();
    int64_t start = 0, end = 0;
    for (absl::string_view field : absl::StrSplit(text, ' ')) {
      if (absl::ConsumePrefix(&field, "start_us=")) {
        ASSERT_TRUE(absl::SimpleAtoi(field, &start)) << text;
      }
      if (absl::ConsumePrefix(&field, "end_us=")) {
        ASSERT_TRUE(absl::SimpleAtoi(field, &end)) << text;
      }
    }
    // The coarse clock lags by up to one tick (at most 10 ms: HZ >= 100).
    const int64_t slack = timeline ? 1000 : 10000;
    EXPECT_GE(start, before - slack) << text;
    EXPECT_LE(end, after + 1000) << text;
    EXPECT_GE(end - start, 20000 - slack) << text;
  }
}

// Three ranks: 0 and 1 wait in all_reduce #5, rank 2 never entered it (its
// last op was all_reduce #4). The summary names rank 2 and what it did. The
// directory does not exist yet: distrun leaves making its own to the first
// rank that writes a record.
TEST(FlightRecorderTest, DistrunSummaryNamesTheRankThatNeverEntered) {
  const std::string dir =
      absl::StrCat(getenv("TEST_TMPDIR"), "/not_yet_made/trace");
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
  EXPECT_TRUE(
      absl::StrContains(testing::FileContents(dir + "/world.rank2.trace"),
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
  const std::string json = testing::FileContents(merged);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(absl::StrContains(json, absl::StrCat("\"pid\":", rank)))
        << json;
  }
  EXPECT_TRUE(absl::StartsWith(json, "{\"traceEvents\":[{"));
  EXPECT_EQ(SummarizeTraces(dir + "/none"), "");
}

}  // namespace
}  // namespace distkit
