// distrun's own stdout and stderr, written without ever blocking the
// supervisor. A reader that stops reading (a stalled ssh link, a stuck log
// collector) used to block distrun inside write(): its timeout, the
// signals it forwards and the ranks' deaths all waited for the reader.
// Now output is queued and written only as far as each fd takes it at once
// (after poll says POLLOUT, at most PIPE_BUF bytes a write to a pipe,
// terminal or socket, which then does not block; files take everything).
// The fds' flags are left alone: they are shared with whatever else writes
// there. A fd that is O_NONBLOCK already (EAGAIN) waits for POLLOUT too,
// rather than losing what did not fit. Output goes out in the order it was
// queued, across fds too (stdout and stderr are often one pipe, and the
// forwarder ends one's open line before the other's text). Over
// kBacklogLimit queued, the
// supervisor stops reading its ranks' pipes, so that a rank writing faster
// than the reader reads blocks on its own pipe, as it would without distrun.

#ifndef DISTKIT_TOOLS_DISTRUN_OUTPUT_SINK_H_
#define DISTKIT_TOOLS_DISTRUN_OUTPUT_SINK_H_

#include <poll.h>

#include <cstddef>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace distkit {

class OutputSink {
 public:
  // Queued past this, the ranks' pipes are not read (see above).
  static constexpr size_t kBacklogLimit = size_t{1} << 20;

  // Queues `text` for `fd`, then writes what `fd` takes now.
  void Write(int fd, absl::string_view text);
  // Writes what the fds take now, in order (after a poll).
  void WriteReady();
  // A pollfd (POLLOUT) for the fd whose output is next, appended to `fds`.
  void AddPollFds(std::vector<pollfd>* fds) const;

  // Bytes queued, over every fd.
  size_t backlog() const { return backlog_; }
  bool backlogged() const { return backlog_ >= kBacklogLimit; }
  bool empty() const { return backlog_ == 0; }
  // When a write last took bytes, or when output was queued with none
  // before it.
  absl::Time last_progress() const { return last_progress_; }
  // The fd whose output is next (the one a stall is waiting on); -1 when
  // nothing is queued.
  int NextFd() const { return chunks_.empty() ? -1 : chunks_.front().fd; }

 private:
  // Consecutive output for one fd.
  struct Chunk {
    int fd;
    std::string bytes;
    size_t sent = 0;  // bytes[0, sent) are written
  };
  struct Fd {
    bool regular = false;  // a regular file: always writable, whole writes
    bool broken = false;   // a write failed (EPIPE, EIO...): output dropped
  };
  // Writes the head chunk's next piece if its fd takes it now; false when
  // it would block.
  bool WriteSome(Chunk& c, Fd& f);

  std::deque<Chunk> chunks_;
  std::map<int, Fd> fds_;
  size_t backlog_ = 0;
  absl::Time last_progress_ = absl::InfinitePast();
};

// Says that distrun gave up on `fd`'s reader (the file it writes to: one
// pipe behind stdout and stderr is one reader), which took nothing for as
// long as distrun waits while it ends: WriteWithin then writes only what
// it takes at once (one stall of a stopped job's exit, not one per
// message), until a write to it completes again.
void MarkReaderStalled(int fd);

// Writes `text` to `fd` as far as its reader takes it, giving up after
// `stall` in which it took nothing (and marking the reader stalled):
// distrun's own messages once its ranks are gone, where a stalled reader
// must not keep it from exiting.
void WriteWithin(int fd, absl::string_view text, absl::Duration stall);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_OUTPUT_SINK_H_
