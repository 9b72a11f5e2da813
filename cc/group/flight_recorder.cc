#include "cc/group/flight_recorder.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

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
  return n == 0 ? 1 : n;
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
    : mask(RingMaskFor(capacity)),
      entries(new Entry[mask + 1]),
      calls(mask + 1),
      errors(mask + 1) {}

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

uint64_t FlightRecorder::Begin(const OpContext& ctx, bool point_to_point) {
  // No lock, no precise clock, no division, and for a collective no locked
  // instruction: this runs on every operation (see Ring).
  const int64_t start = Ticks();
  Ring& ring = point_to_point ? p2p_ : collectives_;
  uint64_t n;
  if (point_to_point) {
    n = ring.next.fetch_add(1, std::memory_order_relaxed) + 1;
  } else {
    n = ring.next.load(std::memory_order_relaxed) + 1;
  }
  Entry& e = ring[n];
  const uint64_t id = n << 1 | (point_to_point ? 1 : 0);
  e.id.store(id, std::memory_order_relaxed);
  e.seq.store(ctx.seq, std::memory_order_relaxed);
  e.start_ticks.store(start, std::memory_order_relaxed);
  e.end_ticks.store(0, std::memory_order_relaxed);
  e.meta.store(static_cast<uint64_t>(ctx.op) | (point_to_point ? kP2P : 0),
               std::memory_order_relaxed);  // running, nothing described
  // Published after the entry (readers, under the lock, go up to it).
  if (!point_to_point) ring.next.store(n, std::memory_order_release);
  return id;
}

void FlightRecorder::Describe(uint64_t id, const OpSignature& signature) {
  // No lock: this runs on every collective, on the operation's own thread,
  // the only one that writes its entry. An entry reused meanwhile (the ring
  // wrapped under an operation still in flight) is left alone.
  Entry& e = RingOf(id)[id >> 1];
  if (e.id.load(std::memory_order_relaxed) != id) return;
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
  Ring& ring = RingOf(id);
  Entry& e = ring[id >> 1];
  if (e.id.load(std::memory_order_relaxed) != id) return;
  ring.calls[(id >> 1) & ring.mask] = std::move(call);
  e.meta.store(e.meta.load(std::memory_order_relaxed) | kHasCall,
               std::memory_order_release);
}

void FlightRecorder::End(uint64_t id, const absl::Status& status) {
  const int64_t end = Ticks();
  Ring& ring = RingOf(id);
  Entry& e = ring[id >> 1];
  if (status.ok()) {
    // No lock, as in Describe.
    if (e.id.load(std::memory_order_relaxed) != id) return;
    e.end_ticks.store(end, std::memory_order_relaxed);
    e.meta.store(WithState(e.meta.load(std::memory_order_relaxed), kDone),
                 std::memory_order_release);
    // The next entry, in this core's cache by the time its operation
    // begins: a record whose line had left the cache held up the stores
    // after it (the step an operation publishes among them: x86 makes
    // stores visible in order).
    __builtin_prefetch(&ring[(id >> 1) + 1], /*rw=*/1);
    return;
  }
  LightMutexLock lock(&mu_);
  if (e.id.load(std::memory_order_relaxed) != id) return;
  ring.errors[(id >> 1) & ring.mask] = std::string(status.message());
  e.end_ticks.store(end, std::memory_order_relaxed);
  e.meta.store(WithState(e.meta.load(std::memory_order_relaxed), kFailed),
               std::memory_order_release);
}

std::vector<uint64_t> FlightRecorder::KeptIds() const {
  std::vector<uint64_t> ids;
  for (const Ring* ring : {&collectives_, &p2p_}) {
    const uint64_t kind = ring == &p2p_ ? 1 : 0;
    uint64_t first, last;
    ring->Kept(capacity_, &first, &last);
    for (uint64_t n = first; n <= last; ++n) {
      const uint64_t id = n << 1 | kind;
      if ((*ring)[n].id.load(std::memory_order_relaxed) == id) {
        ids.push_back(id);
      }
    }
  }
  // Oldest first across both rings (by start, then by number).
  std::stable_sort(ids.begin(), ids.end(), [this](uint64_t a, uint64_t b) {
    return RingOf(a)[a >> 1].start_ticks.load(std::memory_order_relaxed) <
           RingOf(b)[b >> 1].start_ticks.load(std::memory_order_relaxed);
  });
  return ids;
}

std::string FlightRecorder::CallOf(uint64_t id) const {
  const Ring& ring = RingOf(id);
  const Entry& e = ring[id >> 1];
  const uint64_t meta = e.meta.load(std::memory_order_acquire);
  if (!(meta & kHasSignature)) {
    return (meta & kHasCall) ? ring.calls[(id >> 1) & ring.mask] : "";
  }
  OpSignature signature;
  signature.seq = e.seq.load(std::memory_order_relaxed);
  const uint64_t dtype_root = e.dtype_root.load(std::memory_order_relaxed);
  signature.dtype = static_cast<int32_t>(static_cast<uint32_t>(dtype_root));
  signature.root =
      static_cast<int32_t>(static_cast<uint32_t>(dtype_root >> 32));
  const uint64_t reduce_op_op = e.reduce_op_op.load(std::memory_order_relaxed);
  signature.reduce_op =
      static_cast<int32_t>(static_cast<uint32_t>(reduce_op_op));
  signature.op = static_cast<uint32_t>(reduce_op_op >> 32);
  signature.count = e.count.load(std::memory_order_relaxed);
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
  for (uint64_t id : KeptIds()) {
    const Ring& ring = RingOf(id);
    const Entry& e = ring[id >> 1];
    const uint64_t meta = e.meta.load(std::memory_order_acquire);
    const uint64_t state = StateOf(meta);
    absl::StrAppend(
        &out, "group=", group_, " rank=", rank_,
        " seq=", e.seq.load(std::memory_order_relaxed),
        " kind=", (meta & kP2P) ? "p2p" : "collective",
        " op=", OpCodeName(static_cast<OpCode>(meta & kOpMask)),
        " state=", StateName(state),
        " start_us=", absl::ToUnixMicros(TimeOf(e.start_ticks.load(), now)),
        " end_us=",
        state == kRunning ? int64_t{0}
                          : absl::ToUnixMicros(TimeOf(e.end_ticks.load(), now)),
        " call=\"", CallOf(id), "\"");
    const std::string& error = ring.errors[(id >> 1) & ring.mask];
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
  for (uint64_t id : KeptIds()) {
    const Entry& e = RingOf(id)[id >> 1];
    const uint64_t meta = e.meta.load(std::memory_order_acquire);
    const uint64_t state = StateOf(meta);
    const absl::Time start = TimeOf(e.start_ticks.load(), now);
    const absl::Time end =
        state == kRunning ? now.time : TimeOf(e.end_ticks.load(), now);
    const std::string call = CallOf(id);
    const absl::string_view op =
        OpCodeName(static_cast<OpCode>(meta & kOpMask));
    absl::StrAppend(&out, first_event ? "" : ",", "{\"name\":\"",
                    JsonEscape(call.empty() ? op : call), "\",\"cat\":\"",
                    (meta & kP2P) ? "p2p" : "collective",
                    "\",\"ph\":\"X\",\"ts\":", absl::ToUnixMicros(start),
                    ",\"dur\":", absl::ToInt64Microseconds(end - start),
                    ",\"pid\":", rank_, ",\"tid\":\"", JsonEscape(group_),
                    "\",\"args\":{\"seq\":", e.seq.load(), ",\"state\":\"",
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
