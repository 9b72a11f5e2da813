#include "cc/group/flight_recorder.h"

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

FlightRecorder::FlightRecorder(std::string group, int global_rank)
    : group_(std::move(group)), rank_(global_rank), ring_(Capacity()) {}

uint64_t FlightRecorder::Begin(const OpContext& ctx, bool point_to_point) {
  // No lock, no clock_gettime: this runs on every operation. Operations on
  // other threads (sends and receives) take other ids, so other entries.
  const int64_t start = FastTicks();
  const uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
  Entry& e = ring_[id % ring_.size()];
  e.id.store(id, std::memory_order_relaxed);
  e.seq.store(ctx.seq, std::memory_order_relaxed);
  e.op.store(static_cast<int>(ctx.op), std::memory_order_relaxed);
  e.p2p.store(point_to_point, std::memory_order_relaxed);
  e.has_call.store(false, std::memory_order_relaxed);
  e.has_signature.store(false, std::memory_order_relaxed);
  e.start_ticks.store(start, std::memory_order_relaxed);
  e.end_ticks.store(0, std::memory_order_relaxed);
  e.state.store(Entry::kRunning, std::memory_order_release);
  return id;
}

void FlightRecorder::Describe(uint64_t id, const OpSignature& signature) {
  // No lock: this runs on every collective, on the operation's own thread.
  // An entry reused meanwhile (the ring wrapped under an operation still in
  // flight) is left alone.
  Entry& e = ring_[id % ring_.size()];
  if (e.id.load(std::memory_order_relaxed) != id) return;
  uint64_t words[Entry::kSignatureWords] = {};
  std::memcpy(words, &signature, sizeof(signature));
  for (size_t i = 0; i < Entry::kSignatureWords; ++i) {
    e.signature_words[i].store(words[i], std::memory_order_relaxed);
  }
  e.has_signature.store(true, std::memory_order_release);
}

void FlightRecorder::Describe(uint64_t id, std::string call) {
  LightMutexLock lock(&mu_);
  Entry& e = ring_[id % ring_.size()];
  if (e.id.load(std::memory_order_relaxed) != id) return;
  e.call = std::move(call);
  e.has_call.store(true, std::memory_order_release);
}

void FlightRecorder::End(uint64_t id, const absl::Status& status) {
  const int64_t end = FastTicks();
  Entry& e = ring_[id % ring_.size()];
  if (status.ok()) {
    // No lock, as in Describe.
    if (e.id.load(std::memory_order_relaxed) != id) return;
    e.end_ticks.store(end, std::memory_order_relaxed);
    e.state.store(Entry::kDone, std::memory_order_release);
    return;
  }
  LightMutexLock lock(&mu_);
  if (e.id.load(std::memory_order_relaxed) != id) return;
  e.error = std::string(status.message());
  e.end_ticks.store(end, std::memory_order_relaxed);
  e.state.store(Entry::kFailed, std::memory_order_release);
}

std::string FlightRecorder::CallOf(const Entry& e) {
  if (!e.has_signature.load(std::memory_order_acquire)) {
    return e.has_call.load(std::memory_order_acquire) ? e.call : "";
  }
  uint64_t words[Entry::kSignatureWords];
  for (size_t i = 0; i < Entry::kSignatureWords; ++i) {
    words[i] = e.signature_words[i].load(std::memory_order_relaxed);
  }
  OpSignature signature;
  std::memcpy(&signature, words, sizeof(signature));
  return signature.Describe();
}

absl::Time FlightRecorder::TimeOf(int64_t ticks, const TickAnchor& now) const {
  return now.TimeOf(ticks, created_);
}

std::string FlightRecorder::Text() const {
  LightMutexLock lock(&mu_);
  const TickAnchor now = TickAnchor::Now();
  std::string out;
  const uint64_t last = next_id_.load(std::memory_order_acquire);
  const uint64_t first = last >= ring_.size() ? last - ring_.size() + 1 : 1;
  for (uint64_t id = first; id <= last; ++id) {
    const Entry& e = ring_[id % ring_.size()];
    if (e.id.load(std::memory_order_relaxed) != id) continue;
    static constexpr const char* kState[] = {"running", "done", "failed"};
    const int state = e.state.load(std::memory_order_acquire);
    absl::StrAppend(
        &out, "group=", group_, " rank=", rank_,
        " seq=", e.seq.load(std::memory_order_relaxed),
        " kind=", e.p2p.load(std::memory_order_relaxed) ? "p2p" : "collective",
        " op=", OpCodeName(static_cast<OpCode>(e.op.load())),
        " state=", kState[state],
        " start_us=", absl::ToUnixMicros(TimeOf(e.start_ticks.load(), now)),
        " end_us=",
        state == Entry::kRunning
            ? int64_t{0}
            : absl::ToUnixMicros(TimeOf(e.end_ticks.load(), now)),
        " call=\"", CallOf(e), "\"");
    if (state == Entry::kFailed && !e.error.empty()) {
      absl::StrAppend(&out, " error=\"", e.error, "\"");
    }
    out += "\n";
  }
  return out;
}

std::string FlightRecorder::ChromeTrace() const {
  LightMutexLock lock(&mu_);
  std::string out = "{\"traceEvents\":[";
  bool first_event = true;
  const TickAnchor now = TickAnchor::Now();
  for (const Entry& e : ring_) {
    if (e.id.load(std::memory_order_relaxed) == 0) continue;
    const int state = e.state.load(std::memory_order_acquire);
    const absl::Time start = TimeOf(e.start_ticks.load(), now);
    const absl::Time end =
        state == Entry::kRunning ? now.time : TimeOf(e.end_ticks.load(), now);
    const std::string call = CallOf(e);
    const std::string op = OpCodeName(static_cast<OpCode>(e.op.load()));
    absl::StrAppend(&out, first_event ? "" : ",", "{\"name\":\"",
                    JsonEscape(call.empty() ? op : call), "\",\"cat\":\"",
                    e.p2p.load() ? "p2p" : "collective",
                    "\",\"ph\":\"X\",\"ts\":", absl::ToUnixMicros(start),
                    ",\"dur\":", absl::ToInt64Microseconds(end - start),
                    ",\"pid\":", rank_, ",\"tid\":\"", JsonEscape(group_),
                    "\",\"args\":{\"seq\":", e.seq.load(), ",\"state\":\"",
                    state == Entry::kRunning
                        ? "running"
                        : (state == Entry::kDone ? "done" : "failed"),
                    "\"}}");
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
  const char* prefix = std::getenv("DISTKIT_TIMELINE");
  if (prefix == nullptr || *prefix == '\0') return;
  std::ofstream f(
      absl::StrCat(prefix, ".", FileSafe(group_), ".rank", rank_, ".json"),
      std::ios::trunc);
  f << ChromeTrace();
}

}  // namespace distkit
