// How the rank supervisor forwards its ranks' output: each stream's lines
// go to distrun's stdout or stderr with a "[rank<N>]: " prefix, a whole line
// in one piece. A line still without its newline (a prompt, a progress bar,
// print(..., end="")) is not held back for good: it goes out once its
// stream has been quiet for kQuietPeriod, once it grows past kMaxPartial,
// and when the stream ends. Such a line is left open: its stream's next
// bytes continue it without a new prefix, unless other output to the same
// place comes first, which ends it with a newline (the continuation then
// starts a new prefixed line). So lines are split only where they did not
// arrive whole. Where distrun's stdout and stderr go to different places
// (`> out 2> err`), one's output never ends the other's open line, and a
// stream's end leaves its last line as the rank wrote it: each place holds
// the bytes its ranks wrote there, prefixed.

#ifndef DISTKIT_TOOLS_DISTRUN_OUTPUT_FORWARDER_H_
#define DISTKIT_TOOLS_DISTRUN_OUTPUT_FORWARDER_H_

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace distkit {

// One output stream of a rank, as the forwarder sees it.
struct RankStream {
  int rank = 0;
  int forward_to = 1;    // the fd its lines go to
  std::string partial;   // bytes after its last newline, not forwarded yet
  absl::Time last_data;  // when its last bytes came
};

class OutputForwarder {
 public:
  // Long enough that a line written in pieces (a block-buffered stdio's
  // flushes) usually arrives whole, short enough for a person waiting.
  static constexpr absl::Duration kQuietPeriod = absl::Milliseconds(100);
  // A line without its newline is not buffered past this.
  static constexpr size_t kMaxPartial = 64 * 1024;

  // `write` writes all of its text to a fd. `one_place`: every fd written
  // to is the same file or terminal (distrun's stdout and stderr together);
  // false: each fd is a place of its own.
  explicit OutputForwarder(
      std::function<void(int fd, absl::string_view text)> write,
      bool one_place = true);

  // Bytes `s` produced at `now`: its complete lines go out at once, the
  // rest once over kMaxPartial.
  void Add(RankStream& s, absl::string_view data, absl::Time now);

  // Forwards `s`'s partial line if it has been quiet for kQuietPeriod.
  void FlushIfQuiet(RankStream& s, absl::Time now);

  // `s` ended (EOF, or its rank is gone): its partial line goes out. In one
  // place its open line is ended with a newline; apart, it is left as it is
  // until other output to its fd comes (nothing continues it).
  void End(RankStream& s);

  // Text of distrun's own (whole lines) to `fd`; ends an open line there
  // first.
  void Message(int fd, absl::string_view text);

  // Ends an open line where distrun's stderr goes, before distrun output
  // that does not come through Message (the supervisor's callbacks write
  // their own).
  void EndOpenLines() { EndOpenLine(Place(2), nullptr); }

 private:
  // A line left without its newline at a place.
  struct OpenLine {
    // Its stream, which may continue it; null once that stream ended.
    const RankStream* stream = nullptr;
    int fd = 1;  // where it went
  };

  int Place(int fd) const { return one_place_ ? 0 : fd; }
  // `text` of `s`, which ends its line or leaves it open.
  void Emit(RankStream& s, absl::string_view text, bool ends_line);
  // Ends the open line at `place` unless it is `except`'s.
  void EndOpenLine(int place, const RankStream* except);

  std::function<void(int, absl::string_view)> write_;
  const bool one_place_;
  // The open line of each place that has one.
  std::map<int, OpenLine> open_;
};

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_OUTPUT_FORWARDER_H_
