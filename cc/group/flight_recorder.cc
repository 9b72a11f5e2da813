#include "cc/group/flight_recorder.h"

#include <time.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "cc/core/fast_clock.h"

namespace distkit {
namespace {

size_t Capacity() {
  const char* env = std::getenv("DISTKIT_FLIGHT_RECORDER_SIZE");
  size_t n = 256;
  if (env != nullptr && !absl::SimpleAtoi(env, &n)) n = 256;
  return std::clamp<size_t>(n, 1, size_t{1} << 20);
}

// Group names hold '/' ("world/1"); file names cannot.
std::string FileSafe(absl::string_view group) {
  return absl::StrReplaceAll(group, {{"/", "."}});
}

std::string JsonEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

namespace {

// DISTKIT_TIMELINE, or nullptr when it is not set (or empty).
const char* TimelinePrefix() {
  const char* prefix = std::getenv("DISTKIT_TIMELINE");
  return prefix != nullptr && *prefix != '\0' ? prefix : nullptr;
}

// An entry's state (FlightRecorder::State) as the records print it.
const char* StateName(uint64_t state) {
  static constexpr const char* kNames[] = {"running", "done", "failed"};
  return kNames[state];
}

uint64_t RingMaskFor(size_t capacity) {
  uint64_t size = 1;
  while (size < capacity) size <<= 1;
  return size - 1;
}

}  // namespace

FlightRecorder::Ring::Ring(size_t capacity)
    : mask(RingMaskFor(capacity + 1)), entries(new Entry[mask + 1]) {}

void FlightRecorder::Ring::Kept(size_t capacity, uint64_t* first,
                                uint64_t* last) const {
  *last = next.load(std::memory_order_acquire);
  *first = *last >= capacity ? *last - capacity + 1 : 1;
}

FlightRecorder::FlightRecorder(std::string group, int global_rank)
    : group_(std::move(group)),
      rank_(global_rank),
      precise_(TimelinePrefix() != nullptr),
      created_(AnchorNow()),
      capacity_(Capacity()),
      collectives_(capacity_),
      p2p_(capacity_) {}

void FlightRecorder::Fill(Entry& e, const OpContext& ctx, int64_t start,
                          bool point_to_point) {
  e.seq.store(ctx.seq, std::memory_order_relaxed);
  e.start_ticks.store(start, std::memory_order_relaxed);
  e.end_ticks.store(0, std::memory_order_relaxed);
  // Running, nothing described.
  e.meta.store(static_cast<uint64_t>(ctx.op) | (point_to_point ? kP2P : 0),
               std::memory_order_relaxed);
}

uint64_t FlightRecorder::Begin(const OpContext& ctx, bool point_to_point) {
  // No lock, no precise clock, no division, and for a collective no locked
  // instruction: this runs on every operation (see Ring).
  const int64_t start = Ticks();
  if (point_to_point) {
    LightMutexLock lock(&mu_);
    const uint64_t n = p2p_.next.load(std::memory_order_relaxed) + 1;
    Entry& e = p2p_[n];
    const uint64_t id = n << 1 | 1;
    e.id.store(id, std::memory_order_relaxed);
    Fill(e, ctx, start, true);
    p2p_.next.store(n, std::memory_order_relaxed);
    return id;
  }
  const uint64_t n = collectives_.next.load(std::memory_order_relaxed) + 1;
  Entry& e = collectives_[n];
  // One collective at a time (the op queue): the last one has ended.
  assert(n == 1 || StateOf(collectives_[n - 1].meta.load(
                       std::memory_order_relaxed)) != kRunning);
  const uint64_t id = n << 1;
  // Invalid while filled (a reader's Snapshot sees the id change).
  e.id.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  Fill(e, ctx, start, false);
  e.id.store(id, std::memory_order_release);
  // Published after the entry (readers, under the lock, go up to it).
  collectives_.next.store(n, std::memory_order_release);
  return id;
}

void FlightRecorder::Describe(uint64_t id, const OpSignature& signature) {
  // Only collectives agree on a signature (sends and receives describe
  // themselves in words).
  if (id & 1) return;
  // No lock: this runs on every collective, on the operation's own thread,
  // the only one that writes its entry.
  Entry& e = collectives_[id >> 1];
  e.dtype_root.store(static_cast<uint32_t>(signature.dtype) |
                         uint64_t{static_cast<uint32_t>(signature.root)} << 32,
                     std::memory_order_relaxed);
  e.reduce_op_op.store(
      static_cast<uint32_t>(signature.reduce_op) | uint64_t{signature.op} << 32,
      std::memory_order_relaxed);
  e.count.store(signature.count, std::memory_order_relaxed);
  e.meta.store(e.meta.load(std::memory_order_relaxed) | kHasSignature,
               std::memory_order_release);
}

void FlightRecorder::Describe(uint64_t id, std::string call) {
  LightMutexLock lock(&mu_);
  MarkLocked(id, kHasCall, kRunning, 0, &RingOf(id).calls, std::move(call));
}

void FlightRecorder::MarkLocked(uint64_t id, uint64_t set, State state,
                                int64_t end_ticks,
                                std::vector<std::string>* strings,
                                std::string text) {
  // An entry reused meanwhile (a send's or receive's ring wrapped under it,
  // still in flight) is left alone; every write to that ring is under the
  // lock.
  Ring& ring = RingOf(id);
  Entry& e = ring[id >> 1];
  if (e.id.load(std::memory_order_relaxed) != id) return;
  if (strings != nullptr) ring.Set(*strings, id >> 1, std::move(text));
  uint64_t meta = e.meta.load(std::memory_order_relaxed) | set;
  if (state != kRunning) {
    e.end_ticks.store(end_ticks, std::memory_order_relaxed);
    meta = WithState(meta, state);
  }
  e.meta.store(meta, std::memory_order_release);
}

void FlightRecorder::End(uint64_t id, const absl::Status& status) {
  const int64_t end = Ticks();
  if (status.ok() && !(id & 1)) {
    // A collective that succeeded: no lock, as in Describe.
    Entry& e = collectives_[id >> 1];
    e.end_ticks.store(end, std::memory_order_relaxed);
    e.meta.store(WithState(e.meta.load(std::memory_order_relaxed), kDone),
                 std::memory_order_release);
    // The next entry, in this core's cache by the time its operation
    // begins: a record whose line had left the cache held up the stores
    // after it (the step an operation publishes among them: x86 makes
    // stores visible in order).
    __builtin_prefetch(&collectives_[(id >> 1) + 1], /*rw=*/1);
    return;
  }
  LightMutexLock lock(&mu_);
  if (status.ok()) {
    MarkLocked(id, 0, kDone, end, nullptr, "");
  } else {
    MarkLocked(id, 0, kFailed, end, &RingOf(id).errors,
               std::string(status.message()));
  }
}

std::optional<FlightRecorder::Record> FlightRecorder::Snapshot(
    uint64_t id) const {
  const Entry& e = RingOf(id)[id >> 1];
  Record r;
  r.id = e.id.load(std::memory_order_acquire);
  if (r.id != id) return std::nullopt;
  // The flags before what they say is there (Describe and End publish
  // them last, with release).
  r.meta = e.meta.load(std::memory_order_acquire);
  r.seq = e.seq.load(std::memory_order_relaxed);
  r.start_ticks = e.start_ticks.load(std::memory_order_relaxed);
  r.end_ticks = e.end_ticks.load(std::memory_order_relaxed);
  r.dtype_root = e.dtype_root.load(std::memory_order_relaxed);
  r.reduce_op_op = e.reduce_op_op.load(std::memory_order_relaxed);
  r.count = e.count.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (e.id.load(std::memory_order_relaxed) != id) return std::nullopt;
  return r;
}

std::vector<FlightRecorder::Record> FlightRecorder::KeptRecords() const {
  std::vector<Record> by_ring[2];
  for (const uint64_t kind : {0, 1}) {
    uint64_t first, last;
    (kind ? p2p_ : collectives_).Kept(capacity_, &first, &last);
    for (uint64_t n = first; n <= last; ++n) {
      if (std::optional<Record> r = Snapshot(n << 1 | kind)) {
        by_ring[kind].push_back(*r);
      }
    }
  }
  // Each ring is in order already: merged by start, ties to collectives.
  std::vector<Record> records;
  records.reserve(by_ring[0].size() + by_ring[1].size());
  std::merge(by_ring[0].begin(), by_ring[0].end(), by_ring[1].begin(),
             by_ring[1].end(), std::back_inserter(records),
             [](const Record& a, const Record& b) {
               return a.start_ticks < b.start_ticks;
             });
  return records;
}

std::string FlightRecorder::CallOf(const Record& r) const {
  if (!(r.meta & kHasSignature)) {
    const Ring& ring = RingOf(r.id);
    return (r.meta & kHasCall) ? Ring::Get(ring.calls, r.id >> 1, ring.mask)
                               : "";
  }
  OpSignature signature;
  signature.seq = r.seq;
  signature.dtype = static_cast<int32_t>(static_cast<uint32_t>(r.dtype_root));
  signature.root =
      static_cast<int32_t>(static_cast<uint32_t>(r.dtype_root >> 32));
  signature.reduce_op =
      static_cast<int32_t>(static_cast<uint32_t>(r.reduce_op_op));
  signature.op = static_cast<uint32_t>(r.reduce_op_op >> 32);
  signature.count = r.count;
  return signature.Describe();
}

int64_t FlightRecorder::Ticks() const {
  if (precise_) return FastTicks();
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

absl::Time FlightRecorder::TimeOf(int64_t ticks, const TickAnchor& now) const {
  if (!precise_) return absl::FromUnixNanos(ticks);
  return now.TimeOf(ticks, created_);
}

std::string FlightRecorder::Text() const {
  LightMutexLock lock(&mu_);
  const TickAnchor now = AnchorNow();
  std::string out;
  for (const Record& r : KeptRecords()) {
    const uint64_t state = StateOf(r.meta);
    absl::StrAppend(&out, "group=", group_, " rank=", rank_, " seq=", r.seq,
                    " kind=", (r.meta & kP2P) ? "p2p" : "collective",
                    " op=", OpCodeName(static_cast<OpCode>(r.meta & kOpMask)),
                    " state=", StateName(state), " start_us=",
                    absl::ToUnixMicros(TimeOf(r.start_ticks, now)), " end_us=",
                    state == kRunning
                        ? int64_t{0}
                        : absl::ToUnixMicros(TimeOf(r.end_ticks, now)),
                    " call=\"", CallOf(r), "\"");
    const Ring& ring = RingOf(r.id);
    const std::string& error = Ring::Get(ring.errors, r.id >> 1, ring.mask);
    if (state == kFailed && !error.empty()) {
      absl::StrAppend(&out, " error=\"", error, "\"");
    }
    out += "\n";
  }
  return out;
}

std::string FlightRecorder::ChromeTrace() const {
  LightMutexLock lock(&mu_);
  std::string out = "{\"traceEvents\":[";
  bool first_event = true;
  const TickAnchor now = AnchorNow();
  for (const Record& r : KeptRecords()) {
    const uint64_t state = StateOf(r.meta);
    const absl::Time start = TimeOf(r.start_ticks, now);
    const absl::Time end =
        state == kRunning ? now.time : TimeOf(r.end_ticks, now);
    const std::string call = CallOf(r);
    const absl::string_view op =
        OpCodeName(static_cast<OpCode>(r.meta & kOpMask));
    absl::StrAppend(&out, first_event ? "" : ",", "{\"name\":\"",
                    JsonEscape(call.empty() ? op : call), "\",\"cat\":\"",
                    (r.meta & kP2P) ? "p2p" : "collective",
                    "\",\"ph\":\"X\",\"ts\":", absl::ToUnixMicros(start),
                    ",\"dur\":", absl::ToInt64Microseconds(end - start),
                    ",\"pid\":", rank_, ",\"tid\":\"", JsonEscape(group_),
                    "\",\"args\":{\"seq\":", r.seq, ",\"state\":\"",
                    StateName(state), "\"}}");
    first_event = false;
  }
  out += "]}\n";
  return out;
}

std::string FlightRecorder::Dump(absl::string_view reason) {
  {
    LightMutexLock lock(&mu_);
    if (dumped_) return "";
    dumped_ = true;
  }
  const std::string text = Text();
  std::string where = "stderr";
  const char* dir = std::getenv("DISTKIT_TRACE_DIR");
  if (dir != nullptr && *dir) {
    // The launcher leaves making it to the first rank with a record.
    std::error_code ignored;
    std::filesystem::create_directories(dir, ignored);
    where = absl::StrCat(dir, "/", FileSafe(group_), ".rank", rank_, ".trace");
    std::ofstream f(where, std::ios::trunc);
    f << "# " << reason << "\n" << text;
    if (!f) where = "stderr";
  }
  if (where == "stderr") {
    fprintf(stderr, "distkit flight recorder, group '%s', rank %d (%.*s):\n%s",
            group_.c_str(), rank_, static_cast<int>(reason.size()),
            reason.data(), text.c_str());
  }
  WriteTimeline();
  return where;
}

void FlightRecorder::WriteTimeline() const {
  const char* prefix = TimelinePrefix();
  if (prefix == nullptr) return;
  std::ofstream f(
      absl::StrCat(prefix, ".", FileSafe(group_), ".rank", rank_, ".json"),
      std::ios::trunc);
  f << ChromeTrace();
}

}  // namespace distkit
