// How the rank supervisor forwards its ranks' output: each stream's lines
// go to distrun's stdout or stderr with a "[rank<N>]: " prefix, a whole line
// in one piece. A line still without its newline (a prompt, a progress bar,
// print(..., end="")) is not held back for good: it goes out once its
// stream has been quiet for kQuietPeriod, once it grows past kMaxPartial,
// and when the stream ends. Such a line is left open: its stream's next
// bytes continue it without a new prefix, unless other output comes first,
// which ends it with a newline (the continuation then starts a new prefixed
// line). So lines are split only where they did not arrive whole.

#ifndef DISTKIT_TOOLS_DISTRUN_OUTPUT_FORWARDER_H_
#define DISTKIT_TOOLS_DISTRUN_OUTPUT_FORWARDER_H_

#include <cstddef>
#include <functional>
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

  // `write` writes all of its text to a fd.
  explicit OutputForwarder(
      std::function<void(int fd, absl::string_view text)> write);

  // Bytes `s` produced at `now`: its complete lines go out at once, the
  // rest once over kMaxPartial.
  void Add(RankStream& s, absl::string_view data, absl::Time now);

  // Forwards `s`'s partial line if it has been quiet for kQuietPeriod.
  void FlushIfQuiet(RankStream& s, absl::Time now);

  // `s` ended (EOF, or its rank is gone): its partial line goes out, and
  // its open line is ended with a newline.
  void End(RankStream& s);

  // Text of distrun's own (whole lines) to `fd`; ends an open line first.
  void Message(int fd, absl::string_view text);

  // Ends an open line, before distrun output that does not come through
  // Message (the supervisor's callbacks write their own).
  void EndOpenLines() { EndOpenLine(nullptr); }

 private:
  // `text` of `s`, which ends its line or leaves it open.
  void Emit(RankStream& s, absl::string_view text, bool ends_line);
  // Ends the open line of a stream other than `except`.
  void EndOpenLine(const RankStream* except);

  std::function<void(int, absl::string_view)> write_;
  // The stream whose last forwarded bytes did not end a line; null if none.
  RankStream* open_ = nullptr;
};

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_OUTPUT_FORWARDER_H_
