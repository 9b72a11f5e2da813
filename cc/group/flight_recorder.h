// FlightRecorder keeps the last N collectives and the last N sends and
// receives of one group on this rank (N = DISTKIT_FLIGHT_RECORDER_SIZE,
// default 256): sequence number, op, what this rank called (dtype, count,
// root, reduction, from the signature it agreed with), start and end times
// and state. When an operation times out, is aborted or loses a peer, the
// group writes the record once (Dump): to
// $DISTKIT_TRACE_DIR/<group>.rank<N>.trace when that variable is set
// (distrun sets it under --log-dir and prints one cross-rank summary from the
// files: which ranks never entered sequence K, and what they were doing),
// else to stderr. With DISTKIT_TIMELINE=<prefix>, the same records are also
// written as a Chrome-trace JSON timeline, <prefix>.rank<N>.json (at a dump
// and when the group is destroyed); distrun merges them into <prefix>.json.
// Times come from the kernel's coarse clock (to its tick, 1/HZ: 1-10 ms) unless
// DISTKIT_TIMELINE is set when the group is made, where a timeline wants the
// time-stamp counter's microseconds: its two reads an operation took the
// recorder past the 5% of a 0.45 us operation it may cost (tools/dkbench
// RESULTS.md, "The cost of safety, second pass").
//
// Text format, one line per operation, oldest first (by start time: within
// one tick of the coarse clock, collectives first; parsed by distrun):
//   group=world rank=2 seq=57 kind=collective op=all_reduce state=running
//   start_us=... end_us=... call="all_reduce #57 float32 x1024 op=sum"

#ifndef DISTKIT_CC_GROUP_FLIGHT_RECORDER_H_
#define DISTKIT_CC_GROUP_FLIGHT_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
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
  // `point_to_point`: a send or receive, which may run on several threads
  // at once; the group's other operations must run one at a time (its op
  // queue runs them so), each Begin after the last End.
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
  // One operation, in one cache line. What every operation writes (Begin;
  // its signature; its end and state when it succeeds) is written without
  // the lock, by the operation's own thread, as atomic words, with raw ticks
  // for times (Ticks()): this runs on every operation. Strings (a send's
  // or receive's description, an error) are rare and kept beside the ring,
  // under the lock.
  struct alignas(64) Entry {
    std::atomic<uint64_t> id{0};
    std::atomic<uint64_t> seq{0};
    std::atomic<int64_t> start_ticks{0};
    std::atomic<int64_t> end_ticks{0};
    // The OpCode (kOpBits), the flags, then the state.
    std::atomic<uint64_t> meta{0};
    // The signature's fields but seq (in seq) and its constant magic, two
    // 32-bit fields a word: dtype and root, reduce op and op, then count.
    std::atomic<uint64_t> dtype_root{0};
    std::atomic<uint64_t> reduce_op_op{0};
    std::atomic<int64_t> count{0};
  };
  static_assert(sizeof(Entry) == 64, "one cache line per operation");

  // The last operations of one kind, in a ring of a power of two of
  // one-line entries (an id's entry is a mask away, not a division).
  // Collectives and point to point have a ring each: a group's collectives
  // run one at a time (its op queue), so theirs numbers them with a plain
  // increment, where a shared counter took a locked instruction, which
  // waits for every store before it, on every operation; sends and
  // receives run on several lanes at once and write theirs under the lock.
  // Measured (tools/dkbench RESULTS.md, "The cost of safety, second pass"):
  // the record's lines leaving the cache and that locked add cost more than
  // the record's own instructions.
  //
  // Readers (a dump, the timeline; under the lock) may run while an
  // operation writes: Begin marks its entry invalid while it fills it
  // (id 0) and readers take each entry as one Record, read between two
  // looks at its id (Snapshot). The ring holds more than it keeps (the next
  // power of two above the capacity), so the entry the next Begin takes is
  // never one a reader is listing. Sends and receives write under the lock:
  // their ring can wrap under one still in flight.
  struct Ring {
    explicit Ring(size_t capacity);
    Entry& operator[](uint64_t n) { return entries[n & mask]; }
    const Entry& operator[](uint64_t n) const { return entries[n & mask]; }
    // The numbers of the entries kept, [*first, *last], given `capacity`.
    void Kept(size_t capacity, uint64_t* first, uint64_t* last) const;

    const uint64_t mask;  // the ring's size (> capacity) - 1
    std::unique_ptr<Entry[]> entries;
    // The last number given; a line of its own (collectives write it on
    // every operation, sends and receives beside them).
    alignas(64) std::atomic<uint64_t> next{0};
    // Descriptions and errors by ring index (under the recorder's lock),
    // valid while the entry's flag or state says so; sized when first
    // written (most groups' collectives never write one).
    alignas(64) std::vector<std::string> calls;
    std::vector<std::string> errors;
    void Set(std::vector<std::string>& strings, uint64_t n, std::string s) {
      if (strings.empty()) strings.resize(mask + 1);
      strings[n & mask] = std::move(s);
    }
    static const std::string& Get(const std::vector<std::string>& strings,
                                  uint64_t n, uint64_t mask) {
      static const std::string* const kNone = new std::string();
      return strings.empty() ? *kNone : strings[n & mask];
    }
  };

  // One entry as read at one moment (Snapshot).
  struct Record {
    uint64_t id, seq, meta, dtype_root, reduce_op_op;
    int64_t start_ticks, end_ticks, count;
  };

  enum State : uint64_t { kRunning = 0, kDone = 1, kFailed = 2 };
  static constexpr int kOpBits = 16;
  static constexpr uint64_t kOpMask = (uint64_t{1} << kOpBits) - 1;
  static constexpr uint64_t kP2P = uint64_t{1} << kOpBits;
  static constexpr uint64_t kHasSignature = kP2P << 1;
  static constexpr uint64_t kHasCall = kP2P << 2;
  static constexpr int kStateShift = kOpBits + 3;
  static uint64_t StateOf(uint64_t meta) { return meta >> kStateShift; }
  static uint64_t WithState(uint64_t meta, State state) {
    return (meta & ((uint64_t{1} << kStateShift) - 1)) |
           (static_cast<uint64_t>(state) << kStateShift);
  }

  // An id is an entry's number in its ring, shifted, with the low bit
  // saying which ring.
  Ring& RingOf(uint64_t id) { return (id & 1) ? p2p_ : collectives_; }
  const Ring& RingOf(uint64_t id) const {
    return (id & 1) ? p2p_ : collectives_;
  }
  // Entry `id` as one Record, if it still holds that operation (its id read
  // before and after its fields, seqlock-style).
  std::optional<Record> Snapshot(uint64_t id) const;
  // Every entry kept, each read once, oldest first: by start time, each
  // ring in its own order (within one tick of the coarse clock,
  // collectives before sends and receives).
  std::vector<Record> KeptRecords() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the record says this rank called (the signature, formatted, or the
  // description).
  std::string CallOf(const Record& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Begin's fields of an entry, but its id.
  static void Fill(Entry& e, const OpContext& ctx, int64_t start,
                   bool point_to_point);
  // Marks entry `id` under the lock, if it still holds that operation:
  // `text` into its slot of `strings` (calls or errors; none if null), `set`
  // or'd into its meta, and its state and end made `state` and `end_ticks`
  // unless kRunning.
  void MarkLocked(uint64_t id, uint64_t set, State state, int64_t end_ticks,
                  std::vector<std::string>* strings, std::string text)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Now, on the recorder's clock: the time-stamp counter (FastTicks) for a
  // timeline, else the coarse real-time clock in nanoseconds.
  int64_t Ticks() const;
  // A Ticks() value as a time (through anchors taken at creation and now,
  // for the counter).
  absl::Time TimeOf(int64_t ticks, const TickAnchor& now) const;
  TickAnchor AnchorNow() const { return {FastNow(), Ticks()}; }

  const std::string group_;
  const int rank_;
  const bool precise_;  // DISTKIT_TIMELINE was set at creation
  const TickAnchor created_;
  const size_t capacity_;  // entries kept per ring
  mutable LightMutex mu_;
  Ring collectives_;
  Ring p2p_;
  bool dumped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_FLIGHT_RECORDER_H_
