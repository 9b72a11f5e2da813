// FlightRecorder keeps the last N operations of one group on this rank (N =
// DISTKIT_FLIGHT_RECORDER_SIZE, default 256): sequence number, op, what this
// rank called (dtype, count, root, reduction, from the signature it agreed
// with), start and end times and state. When an operation times out, is
// aborted or loses a peer, the group writes the record once (Dump): to
// $DISTKIT_TRACE_DIR/<group>.rank<N>.trace when that variable is set
// (distrun sets it under --log-dir and prints one cross-rank summary from the
// files: which ranks never entered sequence K, and what they were doing),
// else to stderr. With DISTKIT_TIMELINE=<prefix>, the same records are also
// written as a Chrome-trace JSON timeline, <prefix>.rank<N>.json (at a dump
// and when the group is destroyed); distrun merges them into <prefix>.json.
//
// Text format, one line per operation (parsed by distrun):
//   group=world rank=2 seq=57 kind=collective op=all_reduce state=running
//   start_us=... end_us=... call="all_reduce #57 float32 x1024 op=sum"

#ifndef DISTKIT_CC_GROUP_FLIGHT_RECORDER_H_
#define DISTKIT_CC_GROUP_FLIGHT_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cc/comm/op_context.h"
#include "cc/comm/op_signature.h"
#include "cc/core/fast_clock.h"
#include "cc/core/light_mutex.h"

namespace distkit {

class FlightRecorder {
 public:
  FlightRecorder(std::string group, int global_rank);

  // An operation starts (on the thread that runs it); returns its id.
  uint64_t Begin(const OpContext& ctx, bool point_to_point);
  // What this rank called: the signature it agreed with (kept as is and
  // formatted only when the record is written: this runs on every
  // collective), or a description (sends and receives).
  void Describe(uint64_t id, const OpSignature& signature);
  void Describe(uint64_t id, std::string call);
  void End(uint64_t id, const absl::Status& status);

  // The records, oldest first, in the text format above.
  std::string Text() const;
  // The records as Chrome-trace events (a JSON object with traceEvents).
  std::string ChromeTrace() const;

  // Writes the record where the environment says (once per recorder for
  // failures; `reason` heads it). Returns where it went.
  std::string Dump(absl::string_view reason);
  // Writes the Chrome-trace timeline if DISTKIT_TIMELINE is set.
  void WriteTimeline() const;

 private:
  // One operation. What every operation writes (Begin; its signature; its
  // end and state when it succeeds) is written without the lock, by the
  // operation's own thread, as atomic words, with raw ticks for times
  // (FastTicks: this runs on every operation); readers hold the lock. The
  // strings change under the lock: a description, an error.
  struct Entry {
    std::atomic<uint64_t> id{0};
    std::atomic<uint64_t> seq{0};
    std::atomic<int> op{0};  // OpCode
    std::atomic<bool> p2p{false};
    std::string call;  // valid while has_call
    std::atomic<bool> has_call{false};
    static constexpr size_t kSignatureWords = (sizeof(OpSignature) + 7) / 8;
    std::atomic<uint64_t> signature_words[kSignatureWords] = {};
    std::atomic<bool> has_signature{false};
    std::atomic<int64_t> start_ticks{0};
    std::atomic<int64_t> end_ticks{0};
    enum State { kRunning, kDone, kFailed };
    std::atomic<int> state{kRunning};
    std::string error;  // valid while state is kFailed
  };
  // What the entry says this rank called (the signature, formatted, or the
  // description); under the lock.
  static std::string CallOf(const Entry& e);
  // A tick count as a time (FastTicks), given an anchor taken now.
  absl::Time TimeOf(int64_t ticks, const TickAnchor& now) const;

  const std::string group_;
  const int rank_;
  const TickAnchor created_ = TickAnchor::Now();
  mutable LightMutex mu_;
  std::vector<Entry> ring_;  // fixed size; entries as said above
  std::atomic<uint64_t> next_id_{0};
  bool dumped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_FLIGHT_RECORDER_H_
