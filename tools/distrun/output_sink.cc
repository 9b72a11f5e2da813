#include "tools/distrun/output_sink.h"

#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/time/clock.h"

namespace distkit {

void OutputSink::Write(int fd, absl::string_view text) {
  auto [it, made] = fds_.try_emplace(fd);
  Fd& f = it->second;
  if (made) {
    struct stat st;
    f.regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  }
  if (f.broken || text.empty()) return;
  // With nothing queued before it, a reader that has been waiting has been
  // waiting as long as it likes: a stall counts from now.
  if (chunks_.empty()) last_progress_ = absl::Now();
  if (chunks_.empty() || chunks_.back().fd != fd) {
    chunks_.push_back(Chunk{fd, std::string(), 0});
  }
  chunks_.back().bytes.append(text.data(), text.size());
  backlog_ += text.size();
  WriteReady();
}

void OutputSink::WriteReady() {
  while (!chunks_.empty()) {
    Chunk& c = chunks_.front();
    Fd& f = fds_[c.fd];
    while (c.sent < c.bytes.size() && !f.broken) {
      if (!WriteSome(c, f)) return;
    }
    backlog_ -= c.bytes.size() - c.sent;  // what a broken fd dropped
    chunks_.pop_front();
  }
}

void OutputSink::AddPollFds(std::vector<pollfd>* fds) const {
  if (!chunks_.empty()) fds->push_back(pollfd{chunks_.front().fd, POLLOUT, 0});
}

bool OutputSink::WriteSome(Chunk& c, Fd& f) {
  size_t n = c.bytes.size() - c.sent;
  if (!f.regular) {
    // POLLOUT on a pipe means a free page at least: a write of up to
    // PIPE_BUF then completes without blocking (likewise, in practice, a
    // terminal's or a socket's).
    pollfd p = {c.fd, POLLOUT, 0};
    const int ready = poll(&p, 1, 0);
    if (ready < 0 && errno == EINTR) return true;
    if (ready == 0) return false;
    if (ready < 0 || (p.revents & (POLLERR | POLLNVAL)) != 0) {
      f.broken = true;
      return true;
    }
    n = std::min<size_t>(n, PIPE_BUF);
  }
  const ssize_t wrote = write(c.fd, c.bytes.data() + c.sent, n);
  if (wrote > 0) {
    c.sent += static_cast<size_t>(wrote);
    backlog_ -= static_cast<size_t>(wrote);
    last_progress_ = absl::Now();
    // A chunk that a steady writer keeps extending is never popped: what
    // is written goes once it is half of it.
    if (c.sent >= 65536 && c.sent * 2 >= c.bytes.size()) {
      c.bytes.erase(0, c.sent);
      c.sent = 0;
    }
    return true;
  }
  if (wrote < 0 && errno == EINTR) return true;
  if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  // The reader is gone (EPIPE) or the fd failed: the rest is lost, as a
  // blocking write that failed lost it.
  f.broken = true;
  return true;
}

namespace {

// What a reader is known by: the file its fd writes to (device and inode),
// so that stdout and stderr on one pipe (2>&1) are one reader, and a new
// pipe that reuses a closed fd's number is not the old one.
std::pair<dev_t, ino_t> ReaderOf(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

// The readers distrun gave up on (a process has one stdout and one stderr,
// so this is the process's, not a sink's).
std::set<std::pair<dev_t, ino_t>>& StalledReaders() {
  static auto* stalled = new std::set<std::pair<dev_t, ino_t>>;
  return *stalled;
}

}  // namespace

void MarkReaderStalled(int fd) { StalledReaders().insert(ReaderOf(fd)); }

void WriteWithin(int fd, absl::string_view text, absl::Duration stall) {
  const std::pair<dev_t, ino_t> reader = ReaderOf(fd);
  if (StalledReaders().count(reader) != 0) stall = absl::ZeroDuration();
  OutputSink sink;
  sink.Write(fd, text);
  while (!sink.empty() && absl::Now() - sink.last_progress() < stall) {
    std::vector<pollfd> fds;
    sink.AddPollFds(&fds);
    if (poll(fds.data(), fds.size(), 50) > 0) sink.WriteReady();
  }
  if (sink.empty()) {
    StalledReaders().erase(reader);  // it reads again
  } else {
    StalledReaders().insert(reader);
  }
}

}  // namespace distkit
