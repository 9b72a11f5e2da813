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
  const absl::Time start = FastNow();
  LightMutexLock lock(&mu_);
  const uint64_t id = ++next_id_;
  // The slot's fields are reset one by one: its strings keep their buffers
  // (this runs on every operation).
  Entry& e = ring_[id % ring_.size()];
  e.id.store(id, std::memory_order_relaxed);
  e.seq = ctx.seq;
  e.p2p = point_to_point;
  e.op = OpCodeName(ctx.op);
  e.call.clear();
  e.has_signature.store(false, std::memory_order_relaxed);
  e.start = start;
  e.end_ns.store(0, std::memory_order_relaxed);
  e.state.store(Entry::kRunning, std::memory_order_relaxed);
  e.error.clear();
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
  if (e.id.load(std::memory_order_relaxed) == id) e.call = std::move(call);
}

void FlightRecorder::End(uint64_t id, const absl::Status& status) {
  const absl::Time end = FastNow();
  Entry& e = ring_[id % ring_.size()];
  if (status.ok()) {
    // No lock, as in Describe.
    if (e.id.load(std::memory_order_relaxed) != id) return;
    e.end_ns.store(absl::ToUnixNanos(end), std::memory_order_relaxed);
    e.state.store(Entry::kDone, std::memory_order_release);
    return;
  }
  LightMutexLock lock(&mu_);
  if (e.id.load(std::memory_order_relaxed) != id) return;
  e.error = std::string(status.message());
  e.end_ns.store(absl::ToUnixNanos(end), std::memory_order_relaxed);
  e.state.store(Entry::kFailed, std::memory_order_release);
}

std::string FlightRecorder::CallOf(const Entry& e) {
  if (!e.has_signature.load(std::memory_order_acquire)) return e.call;
  uint64_t words[Entry::kSignatureWords];
  for (size_t i = 0; i < Entry::kSignatureWords; ++i) {
    words[i] = e.signature_words[i].load(std::memory_order_relaxed);
  }
  OpSignature signature;
  std::memcpy(&signature, words, sizeof(signature));
  return signature.Describe();
}

absl::Time FlightRecorder::EndOf(const Entry& e) {
  return absl::FromUnixNanos(e.end_ns.load(std::memory_order_relaxed));
}

std::string FlightRecorder::Text() const {
  LightMutexLock lock(&mu_);
  std::string out;
  const uint64_t first =
      next_id_ >= ring_.size() ? next_id_ - ring_.size() + 1 : 1;
  for (uint64_t id = first; id <= next_id_; ++id) {
    const Entry& e = ring_[id % ring_.size()];
    if (e.id.load(std::memory_order_relaxed) != id) continue;
    static constexpr const char* kState[] = {"running", "done", "failed"};
    const int state = e.state.load(std::memory_order_acquire);
    absl::StrAppend(
        &out, "group=", group_, " rank=", rank_, " seq=", e.seq,
        " kind=", e.p2p ? "p2p" : "collective", " op=", e.op,
        " state=", kState[state], " start_us=", absl::ToUnixMicros(e.start),
        " end_us=",
        state == Entry::kRunning ? int64_t{0} : absl::ToUnixMicros(EndOf(e)),
        " call=\"", CallOf(e), "\"");
    if (!e.error.empty()) absl::StrAppend(&out, " error=\"", e.error, "\"");
    out += "\n";
  }
  return out;
}

std::string FlightRecorder::ChromeTrace() const {
  LightMutexLock lock(&mu_);
  std::string out = "{\"traceEvents\":[";
  bool first_event = true;
  const absl::Time now = absl::Now();
  for (const Entry& e : ring_) {
    if (e.id.load(std::memory_order_relaxed) == 0) continue;
    const int state = e.state.load(std::memory_order_acquire);
    const absl::Time end = state == Entry::kRunning ? now : EndOf(e);
    const std::string call = CallOf(e);
    absl::StrAppend(&out, first_event ? "" : ",", "{\"name\":\"",
                    JsonEscape(call.empty() ? e.op : call), "\",\"cat\":\"",
                    e.p2p ? "p2p" : "collective",
                    "\",\"ph\":\"X\",\"ts\":", absl::ToUnixMicros(e.start),
                    ",\"dur\":", absl::ToInt64Microseconds(end - e.start),
                    ",\"pid\":", rank_, ",\"tid\":\"", JsonEscape(group_),
                    "\",\"args\":{\"seq\":", e.seq, ",\"state\":\"",
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
