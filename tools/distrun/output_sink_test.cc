#include "tools/distrun/output_sink.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// A pipe whose reader the test controls; its buffer a page where the
// kernel allows (so that it fills with little output).
struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    r = fds[0];
    w = fds[1];
    (void)fcntl(r, F_SETPIPE_SZ, static_cast<int>(sysconf(_SC_PAGESIZE)));
  }
  ~Pipe() {
    if (r >= 0) close(r);
    if (w >= 0) close(w);
  }
  // Everything readable now.
  std::string ReadAvailable() {
    std::string got;
    char buf[65536];
    for (;;) {
      pollfd p = {r, POLLIN, 0};
      if (poll(&p, 1, 0) <= 0) return got;
      const ssize_t n = read(r, buf, sizeof(buf));
      if (n <= 0) return got;
      got.append(buf, static_cast<size_t>(n));
    }
  }
};

// The text of line i of a numbered series.
std::string Line(int i) { return absl::StrCat("line ", i, "\n"); }

// What `p` delivers of `sink`'s queued output, reading while the sink
// writes, until `bytes` came (or 20 s passed).
std::string ReadWhileWriting(Pipe& p, OutputSink& sink, size_t bytes) {
  std::string got;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (got.size() < bytes && absl::Now() < deadline) {
    got += p.ReadAvailable();
    sink.WriteReady();
  }
  return got;
}

TEST(OutputSinkTest, AReaderThatDoesNotReadNeverBlocksTheWriter) {
  Pipe p;
  OutputSink sink;
  const absl::Time start = absl::Now();
  std::string sent;
  for (int i = 0; i < 20000; ++i) {  // ~200 KB into a one-page pipe
    sink.Write(p.w, Line(i));
    sent += Line(i);
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_GT(sink.backlog(), size_t{100000});
  EXPECT_FALSE(sink.empty());
  // Read on: everything comes, in order, once the reader reads.
  EXPECT_EQ(ReadWhileWriting(p, sink, sent.size()), sent);
  EXPECT_TRUE(sink.empty());
}

TEST(OutputSinkTest, BacklogPastTheLimitIsReported) {
  Pipe p;
  OutputSink sink;
  const std::string block(64 * 1024, 'x');
  for (size_t queued = 0; queued < OutputSink::kBacklogLimit + block.size();
       queued += block.size()) {
    sink.Write(p.w, block);
  }
  EXPECT_TRUE(sink.backlogged());
  std::vector<pollfd> fds;
  sink.AddPollFds(&fds);
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_EQ(fds[0].fd, p.w);
  EXPECT_EQ(fds[0].events, POLLOUT);
}

// stdout and stderr are often one pipe: what was queued for one goes out
// before what was queued later for the other.
TEST(OutputSinkTest, KeepsTheOrderAcrossFds) {
  Pipe p;
  const int other = dup(p.w);  // the same pipe under another number
  ASSERT_GE(other, 0);
  OutputSink sink;
  std::string sent;
  for (int i = 0; i < 5000; ++i) {
    const int fd = i % 3 == 0 ? other : p.w;
    sink.Write(fd, Line(i));
    sent += Line(i);
  }
  EXPECT_EQ(ReadWhileWriting(p, sink, sent.size()), sent);
  close(other);
}

// A fd that is O_NONBLOCK already (shared with a program that set it):
// EAGAIN keeps the rest queued instead of dropping it.
TEST(OutputSinkTest, NonBlockingFdLosesNothing) {
  Pipe p;
  ASSERT_EQ(fcntl(p.w, F_SETFL, O_NONBLOCK), 0);
  OutputSink sink;
  std::string sent;
  for (int i = 0; i < 20000; ++i) {
    sink.Write(p.w, Line(i));
    sent += Line(i);
  }
  EXPECT_EQ(ReadWhileWriting(p, sink, sent.size()), sent);
}

// A reader that went away: the output is dropped (as a failed blocking write
// dropped it), and nothing stays queued to wait for.
TEST(OutputSinkTest, AGoneReaderDropsTheOutput) {
  signal(SIGPIPE, SIG_IGN);
  Pipe p;
  OutputSink sink;
  for (int i = 0; i < 20000; ++i) sink.Write(p.w, Line(i));
  ASSERT_FALSE(sink.empty());
  close(p.r);
  p.r = -1;
  sink.WriteReady();
  EXPECT_TRUE(sink.empty());
  sink.Write(p.w, "later\n");
  EXPECT_TRUE(sink.empty());
}

TEST(OutputSinkTest, ARegularFileTakesEverythingAtOnce) {
  const std::string path = absl::StrCat(getenv("TEST_TMPDIR"), "/sink_file");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  OutputSink sink;
  const std::string big(3 * 1024 * 1024, 'f');
  sink.Write(fd, big);
  EXPECT_TRUE(sink.empty());
  EXPECT_EQ(lseek(fd, 0, SEEK_END), static_cast<off_t>(big.size()));
  close(fd);
}

// The time of the last progress moves while the reader takes bytes, and
// stands still while it takes none (what the supervisor's stalled-reader
// limit reads).
TEST(OutputSinkTest, ProgressStandsStillWhileTheReaderStalls) {
  Pipe p;
  OutputSink sink;
  for (int i = 0; i < 20000; ++i) sink.Write(p.w, Line(i));
  const absl::Time stalled = sink.last_progress();
  absl::SleepFor(absl::Milliseconds(50));
  sink.WriteReady();
  EXPECT_EQ(sink.last_progress(), stalled);
  p.ReadAvailable();
  sink.WriteReady();
  EXPECT_GT(sink.last_progress(), stalled);
}

// WriteWithin gives a stalled reader `stall`, once: after it gave up (or
// the supervisor did, MarkReaderStalled), a later message to that reader
// takes what fits at once instead of another wait, until one is written
// whole again. Other readers are not affected; one pipe behind two fds is
// one reader.
TEST(OutputSinkTest, AReaderGivenUpOnIsNotWaitedForAgain) {
  Pipe stalled, other;
  const std::string big(1 << 20, 'x');  // more than the pipe holds
  absl::Time start = absl::Now();
  WriteWithin(stalled.w, big, absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  start = absl::Now();
  WriteWithin(stalled.w, big, absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // A reader that takes everything is still given all of it.
  start = absl::Now();
  WriteWithin(other.w, "a line\n", absl::Seconds(30));
  EXPECT_EQ(other.ReadAvailable(), "a line\n");
  const int same = dup(other.w);  // as stderr on stdout's pipe (2>&1)
  MarkReaderStalled(other.w);
  WriteWithin(same, big, absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  close(same);
  // The stalled reader reads again: a message written whole clears it.
  stalled.ReadAvailable();
  WriteWithin(stalled.w, "x\n", absl::Seconds(30));
  start = absl::Now();
  WriteWithin(stalled.w, big, absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
}

}  // namespace
}  // namespace distkit
