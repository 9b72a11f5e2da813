#include "tools/distrun/output_forwarder.h"

#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// What the forwarder wrote, fd 1 and fd 2 in one text (as on a terminal),
// and fd 2's alone.
struct Sink {
  std::string all, err;
  OutputForwarder forwarder{[this](int fd, absl::string_view text) {
    all.append(text.data(), text.size());
    if (fd == 2) err.append(text.data(), text.size());
  }};
};

const absl::Time t0 = absl::FromUnixSeconds(1000);

TEST(OutputForwarderTest, WholeLinesGoOutAtOnceEachPrefixed) {
  Sink sink;
  RankStream s{3, 1};
  sink.forwarder.Add(s, "one\ntwo\nthr", t0);
  EXPECT_EQ(sink.all, "[rank3]: one\n[rank3]: two\n");
  sink.forwarder.Add(s, "ee\n", t0);
  EXPECT_EQ(sink.all, "[rank3]: one\n[rank3]: two\n[rank3]: three\n");
}

// A line that arrives in pieces within the quiet period is held and goes out
// whole, even with another rank's lines in between.
TEST(OutputForwarderTest, KeepsALineArrivingInPiecesWhole) {
  Sink sink;
  RankStream a{0, 1}, b{1, 1};
  sink.forwarder.Add(a, "hello ", t0);
  sink.forwarder.FlushIfQuiet(a, t0 + absl::Milliseconds(50));
  sink.forwarder.Add(b, "other\n", t0 + absl::Milliseconds(60));
  sink.forwarder.Add(a, "world\n", t0 + absl::Milliseconds(70));
  EXPECT_EQ(sink.all, "[rank1]: other\n[rank0]: hello world\n");
}

// A quiet partial line goes out without a newline; its stream's next bytes
// continue it.
TEST(OutputForwarderTest, QuietPartialLineGoesOutAndIsContinued) {
  Sink sink;
  RankStream s{0, 1};
  sink.forwarder.Add(s, "prompt> ", t0);
  sink.forwarder.FlushIfQuiet(s, t0 + absl::Milliseconds(99));
  EXPECT_EQ(sink.all, "");
  sink.forwarder.FlushIfQuiet(s, t0 + OutputForwarder::kQuietPeriod);
  EXPECT_EQ(sink.all, "[rank0]: prompt> ");
  sink.forwarder.Add(s, "yes\nnext\n", t0 + absl::Seconds(5));
  EXPECT_EQ(sink.all, "[rank0]: prompt> yes\n[rank0]: next\n");
}

// Other output (another rank, the same rank's stderr, distrun's own message)
// ends an open line first; the continuation starts a new prefixed line.
TEST(OutputForwarderTest, OtherOutputEndsAnOpenLine) {
  Sink sink;
  RankStream out{0, 1}, err{0, 2}, other{1, 1};
  sink.forwarder.Add(out, "10%", t0);
  sink.forwarder.FlushIfQuiet(out, t0 + absl::Seconds(1));
  sink.forwarder.Add(other, "line\n", t0 + absl::Seconds(1));
  sink.forwarder.Add(out, " 20%", t0 + absl::Seconds(2));
  sink.forwarder.FlushIfQuiet(out, t0 + absl::Seconds(3));
  sink.forwarder.Add(err, "warning\n", t0 + absl::Seconds(3));
  sink.forwarder.Add(out, " 30%", t0 + absl::Seconds(4));
  sink.forwarder.FlushIfQuiet(out, t0 + absl::Seconds(5));
  sink.forwarder.Message(2, "distrun: note\n");
  EXPECT_EQ(sink.all,
            "[rank0]: 10%\n[rank1]: line\n[rank0]:  20%\n[rank0]: warning\n"
            "[rank0]:  30%\ndistrun: note\n");
  EXPECT_EQ(sink.err, "[rank0]: warning\ndistrun: note\n");
}

// A line without a newline is not buffered past kMaxPartial: it goes out
// at once, left open.
TEST(OutputForwarderTest, LongPartialLineGoesOutPastTheBound) {
  Sink sink;
  RankStream s{2, 1};
  const std::string bound(OutputForwarder::kMaxPartial, 'x');
  sink.forwarder.Add(s, bound, t0);
  EXPECT_EQ(sink.all, "");
  sink.forwarder.Add(s, "y", t0);
  EXPECT_EQ(sink.all, "[rank2]: " + bound + "y");
  sink.forwarder.Add(s, "z\n", t0);
  EXPECT_EQ(sink.all, "[rank2]: " + bound + "yz\n");
}

// At the stream's end its partial line goes out ended; an open line is
// ended with a newline.
TEST(OutputForwarderTest, EndForwardsTheRestAndEndsTheLine) {
  Sink sink;
  RankStream a{0, 1}, b{1, 1};
  sink.forwarder.Add(a, "last", t0);
  sink.forwarder.End(a);
  sink.forwarder.Add(b, "open", t0);
  sink.forwarder.FlushIfQuiet(b, t0 + absl::Seconds(1));
  sink.forwarder.End(b);
  sink.forwarder.End(b);
  EXPECT_EQ(sink.all, "[rank0]: last\n[rank1]: open\n");
}

// What the forwarder wrote where distrun's stdout and stderr are two files
// (`> out 2> err`).
struct ApartSink {
  std::string out, err;
  OutputForwarder forwarder{
      [this](int fd, absl::string_view text) {
        (fd == 2 ? err : out).append(text.data(), text.size());
      },
      /*one_place=*/false};
};

// Apart, a rank's stderr (or distrun's message) does not end its open
// stdout line, and a stream's end adds no newline: each file holds the
// bytes written to it, prefixed. Only other output to the same file ends an
// open line there.
TEST(OutputForwarderTest, ApartEachFileKeepsTheBytesWrittenToIt) {
  ApartSink sink;
  RankStream out{0, 1}, err{0, 2}, other{1, 1};
  sink.forwarder.Add(out, "10%", t0);
  sink.forwarder.FlushIfQuiet(out, t0 + absl::Seconds(1));
  sink.forwarder.Add(err, "warning\n", t0 + absl::Seconds(1));
  sink.forwarder.Message(2, "distrun: note\n");
  sink.forwarder.Add(out, " 20%\nlast", t0 + absl::Seconds(2));
  sink.forwarder.End(out);
  EXPECT_EQ(sink.out, "[rank0]: 10% 20%\n[rank0]: last");
  // Other output to stdout ends the open line; so does a replacement's,
  // which reuses the stream.
  sink.forwarder.Add(other, "other\n", t0 + absl::Seconds(3));
  sink.forwarder.Add(other, "open", t0 + absl::Seconds(3));
  sink.forwarder.End(other);
  sink.forwarder.Add(out, "again\n", t0 + absl::Seconds(4));
  EXPECT_EQ(sink.out,
            "[rank0]: 10% 20%\n[rank0]: last\n[rank1]: other\n"
            "[rank1]: open\n[rank0]: again\n");
  sink.forwarder.Add(err, "tail", t0 + absl::Seconds(5));
  sink.forwarder.End(err);
  EXPECT_EQ(sink.err, "[rank0]: warning\ndistrun: note\n[rank0]: tail");
  // Before distrun's own output to stderr outside Message.
  sink.forwarder.EndOpenLines();
  EXPECT_EQ(sink.err, "[rank0]: warning\ndistrun: note\n[rank0]: tail\n");
}

}  // namespace
}  // namespace distkit
