// dkgpusim's CUDA runtime: devices, contexts, device memory the host cannot
// touch, and streams whose work runs late on threads of their own.

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>

#include "testing/gpu_sim/sim_internal.h"

namespace dksim {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kDeviceMemory = size_t{16} << 30;  // what each device "has"
// Freed device ranges stay reserved (PROT_NONE) this long, so a stale
// pointer is caught as a use after free instead of reaching new memory.
constexpr size_t kQuarantine = 4096;
// Destroyed events kept before their memory is reused (stale handles).
constexpr size_t kDeadEvents = 4096;

Config* g_config = nullptr;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::atoi(v);
}

// CUDA_VISIBLE_DEVICES: a list of device numbers, read up to the first one
// that does not exist ("" and "-1" hide them all), as the real runtime does.
std::vector<int> VisibleDevices(int machine) {
  std::vector<int> out;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr) {
    for (int d = 0; d < machine; ++d) out.push_back(d);
    return out;
  }
  std::string s(v);
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(start, comma - start);
    char* end = nullptr;
    long d = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || d < 0 || d >= machine) break;
    bool seen = false;
    for (int o : out) seen |= (o == d);
    if (seen) break;
    out.push_back(static_cast<int>(d));
    start = comma + 1;
  }
  return out;
}

void PrintV(const char* fmt, va_list ap) {
  char buf[2048];
  int n = std::snprintf(buf, sizeof(buf), "dkgpusim: ");
  int m = std::vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
  if (m < 0) m = 0;
  size_t len = std::min<size_t>(n + m, sizeof(buf) - 2);
  buf[len++] = '\n';
  // One write: lines from several threads and processes stay whole.
  ssize_t ignored = write(2, buf, len);
  (void)ignored;
}

// The seeded source of every delay, shared by the process's threads.
struct LockedRng {
  std::mutex mu;
  std::mt19937_64 gen;
};
LockedRng& Rng() {
  static LockedRng* r = new LockedRng;
  return *r;
}

std::atomic<bool> g_runtime_used{false};
std::atomic<bool> g_forked_dirty{false};

void AtForkChild() {
  if (g_runtime_used.load()) g_forked_dirty.store(true);
}

__attribute__((constructor)) void LoadLibrary() {
  Config* c = new Config;
  const int machine = EnvInt("DKSIM_DEVICES", 2);
  if (machine < 0 || machine > kMaxDevices) {
    Fatal("DKSIM_DEVICES=%d: between 0 and %d devices", machine, kMaxDevices);
  }
  c->physical = VisibleDevices(machine);
  c->devices = static_cast<int>(c->physical.size());
  const char* seed = std::getenv("DKSIM_SEED");
  if (seed != nullptr && *seed != '\0') {
    c->seed = std::strtoull(seed, nullptr, 10);
  } else {
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = getpid();
    c->seed = r % 1000000;
  }
  c->max_delay_us = std::max(0, EnvInt("DKSIM_MAX_DELAY_US", 200));
  if (const char* log = std::getenv("DKSIM_CONTEXT_LOG")) c->context_log = log;
  c->die_rank = EnvInt("DKSIM_NCCL_DIE_RANK", -1);
  c->die_at = EnvInt("DKSIM_NCCL_DIE_AT", 0);
  c->hang_rank = EnvInt("DKSIM_NCCL_HANG_RANK", -1);
  c->hang_at = EnvInt("DKSIM_NCCL_HANG_AT", 0);
  c->nccl_inprogress = EnvInt("DKSIM_NCCL_INPROGRESS", 0) != 0;
  c->sync_memcpy = EnvInt("DKSIM_SYNC_MEMCPY", 0) != 0;
  g_config = c;
  Rng().gen.seed(c->seed);
  pthread_atfork(nullptr, nullptr, AtForkChild);
  Print(
      "seed %llu (DKSIM_SEED), delays up to %d us (DKSIM_MAX_DELAY_US), "
      "%d device(s)%s; a simulator, not CUDA",
      static_cast<unsigned long long>(c->seed), c->max_delay_us, c->devices,
      c->sync_memcpy ? ", cudaMemcpy fully synchronous (DKSIM_SYNC_MEMCPY)"
                     : "");
}

// ---- Devices and contexts ------------------------------------------------

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

std::atomic<unsigned> g_context_mask{0};
std::mutex g_context_mu;

// Copies and memsets made (device memory on a side), by direction, for tests
// that a path does its work on the device (dksimCopyCount, dksimMemsetCount).
enum CopyDirection { kToDevice = 1, kToHost = 2, kDeviceToDevice = 3 };
std::atomic<long> g_copies[4];
std::atomic<long> g_memsets{0};

struct DeviceState {
  std::mutex enqueue_mu;         // every Enqueue on this device's streams
  Stream* legacy = nullptr;      // created with the context
  std::vector<Stream*> streams;  // all others, until drained after destroy
  std::atomic<long> mallocs{0};
  std::atomic<long> live{0};
  std::atomic<size_t> bytes{0};
};

DeviceState& Dev(int d) {
  static DeviceState* devices = new DeviceState[kMaxDevices];
  return devices[d];
}

// Records e as the thread's last error (cudaErrorNotReady is no error).
cudaError_t Ret(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
  return e;
}

// The checks every call that needs the runtime makes.
cudaError_t Usable() {
  if (g_forked_dirty.load()) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      Print(
          "CUDA called in a process forked after its parent used CUDA; "
          "the real runtime cannot be used there either");
    }
    return cudaErrorInitializationError;
  }
  if (Cfg().devices == 0) return cudaErrorNoDevice;
  return cudaSuccess;
}

// The current device, its context created (what most calls need).
cudaError_t NeedDevice(int* device) {
  if (cudaError_t e = Usable(); e != cudaSuccess) return e;
  *device = t_device;
  EnsureContext(t_device);
  return cudaSuccess;
}

// ---- Memory ---------------------------------------------------------------

struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;
  size_t reserved = 0;  // the PROT_NONE range, a guard page included
  int device = 0;
  char* internal = nullptr;
  size_t internal_bytes = 0;
  bool freed = false;
};

struct PinnedAllocation {
  size_t size;
  int device;
};

std::mutex g_mem_mu;
std::map<uintptr_t, Allocation*>& Allocations() {
  static auto* m = new std::map<uintptr_t, Allocation*>;
  return *m;
}
std::deque<Allocation*>& Quarantine() {
  static auto* q = new std::deque<Allocation*>;
  return *q;
}
std::map<uintptr_t, PinnedAllocation>& Pinned() {
  static auto* m = new std::map<uintptr_t, PinnedAllocation>;
  return *m;
}

// g_mem_mu held.
Allocation* FindAllocation(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto& all = Allocations();
  auto it = all.upper_bound(a);
  if (it == all.begin()) return nullptr;
  --it;
  Allocation* al = it->second;
  return a < al->base + al->reserved ? al : nullptr;
}

// ---- Streams and events ---------------------------------------------------

std::mutex g_handles_mu;
std::set<Stream*>& LiveStreams() {
  static auto* s = new std::set<Stream*>;
  return *s;
}

void WorkerLoop(Stream* s) {
  std::unique_lock<std::mutex> lk(s->mu);
  for (;;) {
    s->cv.wait(lk, [s] { return !s->queue.empty() || s->destroyed; });
    if (s->queue.empty()) break;  // destroyed and drained
    WorkItem item = std::move(s->queue.front());
    s->queue.pop_front();
    lk.unlock();
    for (const Dep& d : item.deps) WaitFor(d.stream, d.seq);
    if (item.delay_us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(item.delay_us));
    }
    if (item.fn) item.fn();
    {
      std::lock_guard<std::mutex> g(DoneMutex());
      s->completed.store(item.seq);
    }
    DoneCv().notify_all();
    lk.lock();
  }
  lk.unlock();
  DeviceState& d = Dev(s->device);
  std::lock_guard<std::mutex> g(d.enqueue_mu);
  for (size_t i = 0; i < d.streams.size(); ++i) {
    if (d.streams[i] == s) {
      d.streams.erase(d.streams.begin() + i);
      break;
    }
  }
  // s stays allocated: a stale handle must not name a new stream, and a
  // Dep on it is simply complete.
}

Stream* NewStream(int device, unsigned flags, bool legacy, bool per_thread) {
  Stream* s = new Stream;
  s->device = device;
  s->flags = flags;
  s->nonblocking = (flags & cudaStreamNonBlocking) != 0;
  s->legacy = legacy;
  s->per_thread = per_thread;
  std::thread(WorkerLoop, s).detach();
  return s;
}

Stream* LegacyStream(int device) {
  DeviceState& d = Dev(device);
  std::lock_guard<std::mutex> g(d.enqueue_mu);
  if (d.legacy == nullptr) d.legacy = NewStream(device, 0, true, false);
  return d.legacy;
}

void DestroyStream(Stream* s) {
  std::lock_guard<std::mutex> g(s->mu);
  s->destroyed = true;
  s->cv.notify_all();
}

// A thread's cudaStreamPerThread, one per device, blocking (it synchronizes
// with the legacy stream), gone with the thread.
struct PerThreadStreams {
  Stream* s[kMaxDevices] = {};
  ~PerThreadStreams() {
    for (Stream* st : s) {
      if (st != nullptr) DestroyStream(st);
    }
  }
};
thread_local PerThreadStreams t_streams;

Stream* PerThreadStream(int device) {
  Stream*& s = t_streams.s[device];
  if (s == nullptr) {
    s = NewStream(device, 0, false, true);
    DeviceState& d = Dev(device);
    std::lock_guard<std::mutex> g(d.enqueue_mu);
    d.streams.push_back(s);
  }
  return s;
}

struct Event {
  int device = 0;
  unsigned flags = 0;
  std::mutex mu;
  Stream* stream = nullptr;  // where last recorded; null before
  uint64_t seq = 0;
  std::shared_ptr<std::atomic<int64_t>> when;  // completion time (ns)
};

std::set<Event*>& LiveEvents() {
  static auto* s = new std::set<Event*>;
  return *s;
}
std::deque<Event*>& DeadEvents() {
  static auto* d = new std::deque<Event*>;
  return *d;
}

Event* LookupEvent(cudaEvent_t h) {
  Event* e = reinterpret_cast<Event*>(h);
  std::lock_guard<std::mutex> g(g_handles_mu);
  return LiveEvents().count(e) ? e : nullptr;
}

bool IsLegacyHandle(cudaStream_t h) {
  return h == nullptr || h == cudaStreamLegacy;
}

// The last enqueued item of s (a snapshot).
uint64_t Enqueued(Stream* s) {
  std::lock_guard<std::mutex> g(Dev(s->device).enqueue_mu);
  return s->enqueued;
}

void SynchronizeDevice(int device) {
  std::vector<std::pair<Stream*, uint64_t>> targets;
  {
    DeviceState& d = Dev(device);
    std::lock_guard<std::mutex> g(d.enqueue_mu);
    if (d.legacy != nullptr) targets.push_back({d.legacy, d.legacy->enqueued});
    for (Stream* s : d.streams) targets.push_back({s, s->enqueued});
  }
  for (auto& t : targets) WaitFor(t.first, t.second);
}

const char* KindName(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost:
      return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice:
      return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost:
      return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice:
      return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault:
      return "cudaMemcpyDefault";
  }
  return "an invalid cudaMemcpyKind";
}

const char* PtrName(PtrKind k) {
  switch (k) {
    case PtrKind::kHost:
      return "pageable host memory";
    case PtrKind::kPinned:
      return "pinned host memory";
    case PtrKind::kDevice:
      return "device memory";
    case PtrKind::kFreedDevice:
      return "freed device memory";
  }
  return "?";
}

// The stream a call runs on: `stream` for an async call, else the current
// device's legacy stream.
cudaError_t CallStream(cudaStream_t stream, bool async, Stream** s) {
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return e;
  if (async) return ResolveStream(stream, s);
  *s = LegacyStream(cur);
  return cudaSuccess;
}

// cudaMemcpy (async = false, on the legacy stream) and cudaMemcpyAsync,
// synchronous with the host exactly where the real runtime is.
cudaError_t Memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                   cudaStream_t stream, bool async, const char* fn) {
  Stream* s = nullptr;
  if (cudaError_t e = CallStream(stream, async, &s); e != cudaSuccess) return e;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return cudaErrorInvalidMemcpyDirection;
  }
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  int ddev = -1, sdev = -1;
  const PtrKind dk = Classify(dst, &ddev);
  const PtrKind sk = Classify(src, &sdev);
  if (dk == PtrKind::kFreedDevice || sk == PtrKind::kFreedDevice) {
    Fatal(
        "%s: %s %p is device memory already freed by cudaFree "
        "(use after free)",
        fn, dk == PtrKind::kFreedDevice ? "dst" : "src",
        dk == PtrKind::kFreedDevice ? dst : src);
  }
  const bool dst_dev = dk == PtrKind::kDevice;
  const bool src_dev = sk == PtrKind::kDevice;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = !src_dev && dst_dev;
      break;
    case cudaMemcpyDeviceToHost:
      ok = src_dev && !dst_dev;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = src_dev && dst_dev;
      break;
    case cudaMemcpyHostToHost:
      ok = !src_dev && !dst_dev;
      break;
    default:
      break;
  }
  if (!ok) {
    Print(
        "%s: %s from %s %p to %s %p: the kind does not match the memory "
        "(cudaErrorInvalidValue)",
        fn, KindName(kind), PtrName(sk), src, PtrName(dk), dst);
    return cudaErrorInvalidValue;
  }
  // Device ranges are checked now (a fault here is the caller's).
  if (dst_dev) Translate(dst, n, fn);
  if (src_dev) Translate(src, n, fn);
  // Whether cudaMemcpy waits where the real one need not.
  const bool wait_anyway = !async && Cfg().sync_memcpy;
  if (src_dev || dst_dev) {
    g_copies[src_dev && dst_dev ? kDeviceToDevice
             : dst_dev          ? kToDevice
                                : kToHost]
        .fetch_add(1);
  }
  if (src_dev && dst_dev) {
    // No host synchronization, even for cudaMemcpy.
    const uint64_t seq = Enqueue(
        s,
        [=] { std::memmove(Translate(dst, n, fn), Translate(src, n, fn), n); },
        {}, true);
    if (wait_anyway) WaitFor(s, seq);
    return cudaSuccess;
  }
  if (dst_dev) {
    if (sk == PtrKind::kPinned) {
      // Read when the copy runs: the host must not change it before then.
      const uint64_t seq = Enqueue(
          s, [=] { std::memcpy(Translate(dst, n, fn), src, n); }, {}, true);
      if (!async) WaitFor(s, seq);
      return cudaSuccess;
    }
    // Pageable: staged before the call returns, written later (even by
    // cudaMemcpy, which may return before the device has the data).
    auto staged = std::make_shared<std::vector<char>>(
        static_cast<const char*>(src), static_cast<const char*>(src) + n);
    const uint64_t seq = Enqueue(
        s, [=] { std::memcpy(Translate(dst, n, fn), staged->data(), n); }, {},
        true);
    if (wait_anyway) WaitFor(s, seq);
    return cudaSuccess;
  }
  if (src_dev) {
    const uint64_t seq = Enqueue(
        s, [=] { std::memcpy(dst, Translate(src, n, fn), n); }, {}, true);
    // To pageable memory the call waits; to pinned memory only cudaMemcpy.
    if (!async || dk != PtrKind::kPinned) WaitFor(s, seq);
    return cudaSuccess;
  }
  const uint64_t seq = Enqueue(
      s, [=] { std::memmove(dst, src, n); }, {}, false);
  WaitFor(s, seq);
  return cudaSuccess;
}

cudaError_t Memset(void* p, int value, size_t n, cudaStream_t stream,
                   bool async, const char* fn) {
  Stream* s = nullptr;
  if (cudaError_t e = CallStream(stream, async, &s); e != cudaSuccess) return e;
  if (n == 0) return cudaSuccess;
  int dev = -1;
  const PtrKind k = Classify(p, &dev);
  if (k == PtrKind::kFreedDevice) {
    Fatal("%s: %p is device memory already freed by cudaFree (use after free)",
          fn, p);
  }
  if (k == PtrKind::kHost) {
    Print(
        "%s: %p is pageable host memory, not device memory "
        "(cudaErrorInvalidValue)",
        fn, p);
    return cudaErrorInvalidValue;
  }
  if (k == PtrKind::kDevice) {
    g_memsets.fetch_add(1);
    // cudaMemset of device memory does not wait either.
    Translate(p, n, fn);
    const uint64_t seq = Enqueue(
        s, [=] { std::memset(Translate(p, n, fn), value, n); }, {}, true);
    if (!async && Cfg().sync_memcpy) WaitFor(s, seq);
    return cudaSuccess;
  }
  const uint64_t seq = Enqueue(
      s, [=] { std::memset(p, value, n); }, {}, true);
  if (!async) WaitFor(s, seq);
  return cudaSuccess;
}

cudaError_t CreateStream(cudaStream_t* out, unsigned flags) {
  if (out == nullptr || (flags & ~1u) != 0) return cudaErrorInvalidValue;
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return e;
  Stream* s = NewStream(cur, flags, false, false);
  {
    DeviceState& d = Dev(cur);
    std::lock_guard<std::mutex> g(d.enqueue_mu);
    d.streams.push_back(s);
  }
  {
    std::lock_guard<std::mutex> g(g_handles_mu);
    LiveStreams().insert(s);
  }
  *out = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t CreateEvent(cudaEvent_t* out, unsigned flags) {
  if (out == nullptr || (flags & ~7u) != 0) return cudaErrorInvalidValue;
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return e;
  Event* ev = new Event;
  ev->device = cur;
  ev->flags = flags;
  {
    std::lock_guard<std::mutex> g(g_handles_mu);
    LiveEvents().insert(ev);
  }
  *out = reinterpret_cast<cudaEvent_t>(ev);
  return cudaSuccess;
}

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};

#define DK_E(code, text) \
  { code, #code, text }
const ErrorText kErrors[] = {
    DK_E(cudaSuccess, "no error"),
    DK_E(cudaErrorInvalidValue, "invalid argument"),
    DK_E(cudaErrorMemoryAllocation, "out of memory"),
    DK_E(cudaErrorInitializationError, "initialization error"),
    DK_E(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    DK_E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    DK_E(cudaErrorInsufficientDriver,
         "CUDA driver version is insufficient for CUDA runtime version"),
    DK_E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    DK_E(cudaErrorInvalidDevice, "invalid device ordinal"),
    DK_E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    DK_E(cudaErrorNotReady, "device not ready"),
    DK_E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    DK_E(cudaErrorLaunchFailure, "unspecified launch failure"),
    DK_E(cudaErrorNotSupported, "operation not supported"),
    DK_E(cudaErrorUnknown, "unknown error"),
};
#undef DK_E

const ErrorText* FindError(cudaError_t e) {
  for (const ErrorText& t : kErrors) {
    if (t.code == e) return &t;
  }
  return nullptr;
}

}  // namespace

// ---- The internal interface (sim_internal.h) ------------------------------

const Config& Cfg() { return *g_config; }

void Print(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PrintV(fmt, ap);
  va_end(ap);
}

void Fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PrintV(fmt, ap);
  va_end(ap);
  std::abort();
}

uint64_t RandomBelow(uint64_t n) {
  if (n <= 1) return 0;
  LockedRng& rng = Rng();
  std::lock_guard<std::mutex> g(rng.mu);
  return rng.gen() % n;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int CurrentDevice() { return t_device; }

bool ForkedAfterInit() { return g_forked_dirty.load(); }

void EnsureContext(int device) {
  const unsigned bit = 1u << device;
  if (g_context_mask.load() & bit) return;
  std::lock_guard<std::mutex> g(g_context_mu);
  if (g_context_mask.load() & bit) return;
  g_runtime_used.store(true);
  g_context_mask.fetch_or(bit);
  if (!Cfg().context_log.empty()) {
    const int fd = open(Cfg().context_log.c_str(),
                        O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
      char line[64];
      const int n = std::snprintf(line, sizeof(line), "%d %d\n",
                                  static_cast<int>(getpid()), device);
      ssize_t ignored = write(fd, line, n);
      (void)ignored;
      close(fd);
    }
  }
}

std::mutex& DoneMutex() {
  static std::mutex* m = new std::mutex;
  return *m;
}

std::condition_variable& DoneCv() {
  static std::condition_variable* cv = new std::condition_variable;
  return *cv;
}

void WaitFor(Stream* s, uint64_t seq) {
  if (s->completed.load() >= seq) return;
  std::unique_lock<std::mutex> lk(DoneMutex());
  DoneCv().wait(lk, [&] { return s->completed.load() >= seq; });
}

uint64_t Enqueue(Stream* s, std::function<void()> fn, std::vector<Dep> extra,
                 bool delay) {
  WorkItem item;
  item.fn = std::move(fn);
  item.deps = std::move(extra);
  if (delay && Cfg().max_delay_us > 0) {
    item.delay_us = static_cast<int>(RandomBelow(Cfg().max_delay_us + 1));
  }
  DeviceState& d = Dev(s->device);
  std::lock_guard<std::mutex> g(d.enqueue_mu);
  // The legacy stream waits for every blocking stream's earlier work; a
  // blocking stream waits for the legacy stream's. Non-blocking: neither.
  if (s->legacy) {
    for (Stream* o : d.streams) {
      if (!o->nonblocking && o->enqueued > o->completed.load()) {
        item.deps.push_back({o, o->enqueued});
      }
    }
  } else if (!s->nonblocking && d.legacy != nullptr &&
             d.legacy->enqueued > d.legacy->completed.load()) {
    item.deps.push_back({d.legacy, d.legacy->enqueued});
  }
  item.seq = ++s->enqueued;
  const uint64_t seq = item.seq;
  {
    std::lock_guard<std::mutex> q(s->mu);
    s->queue.push_back(std::move(item));
  }
  s->cv.notify_one();
  return seq;
}

cudaError_t StreamForDevice(cudaStream_t h, int device, Stream** out) {
  if (IsLegacyHandle(h)) {
    EnsureContext(device);
    *out = LegacyStream(device);
    return cudaSuccess;
  }
  if (h == cudaStreamPerThread) {
    EnsureContext(device);
    *out = PerThreadStream(device);
    return cudaSuccess;
  }
  Stream* s = reinterpret_cast<Stream*>(h);
  std::lock_guard<std::mutex> g(g_handles_mu);
  if (!LiveStreams().count(s)) return cudaErrorInvalidResourceHandle;
  *out = s;
  return cudaSuccess;
}

cudaError_t ResolveStream(cudaStream_t h, Stream** out) {
  if (cudaError_t e = Usable(); e != cudaSuccess) return e;
  return StreamForDevice(h, t_device, out);
}

PtrKind Classify(const void* p, int* device) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  if (Allocation* a = FindAllocation(p)) {
    *device = a->device;
    return a->freed ? PtrKind::kFreedDevice : PtrKind::kDevice;
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  auto& pinned = Pinned();
  auto it = pinned.upper_bound(addr);
  if (it != pinned.begin()) {
    --it;
    if (addr < it->first + it->second.size) {
      *device = it->second.device;
      return PtrKind::kPinned;
    }
  }
  return PtrKind::kHost;
}

char* Translate(const void* p, size_t bytes, const char* what) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  Allocation* a = FindAllocation(p);
  if (a == nullptr) {
    Fatal("%s: device access to %p, which is not device memory", what, p);
  }
  if (a->freed) {
    Fatal(
        "%s: device access to %p, in a %zu-byte allocation at %p already "
        "freed by cudaFree (use after free)",
        what, p, a->size, reinterpret_cast<void*>(a->base));
  }
  const size_t off = reinterpret_cast<uintptr_t>(p) - a->base;
  if (off + bytes > a->size || off + bytes < off) {
    Fatal(
        "%s: out-of-bounds device access: %zu bytes at %p run %zu bytes "
        "past the end of a %zu-byte allocation at %p (device %d)",
        what, bytes, p, off + bytes - a->size, a->size,
        reinterpret_cast<void*>(a->base), a->device);
  }
  return a->internal + off;
}

bool CheckDeviceRange(const void* p, size_t bytes, int device,
                      std::string* why) {
  char buf[256];
  std::lock_guard<std::mutex> g(g_mem_mu);
  Allocation* a = FindAllocation(p);
  if (a == nullptr || a->freed) {
    std::snprintf(buf, sizeof(buf), "%p is %s", p,
                  a == nullptr ? "not device memory"
                               : "device memory already freed by cudaFree");
    *why = buf;
    return false;
  }
  if (a->device != device) {
    std::snprintf(buf, sizeof(buf),
                  "%p is memory of device %d, not of device %d", p, a->device,
                  device);
    *why = buf;
    return false;
  }
  const size_t off = reinterpret_cast<uintptr_t>(p) - a->base;
  if (off + bytes > a->size) {
    std::snprintf(buf, sizeof(buf),
                  "%zu bytes at %p run past the end of a %zu-byte allocation",
                  bytes, p, a->size);
    *why = buf;
    return false;
  }
  return true;
}

}  // namespace dksim

// ---- The exported CUDA runtime --------------------------------------------

using namespace dksim;  // NOLINT: the C API below is one flat list

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Ret(cudaErrorInvalidValue);
  if (ForkedAfterInit()) return Ret(Usable());
  *count = Cfg().devices;
  return Ret(Cfg().devices == 0 ? cudaErrorNoDevice : cudaSuccess);
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Ret(cudaErrorInvalidValue);
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  if (device < 0 || device >= Cfg().devices) {
    return Ret(cudaErrorInvalidDevice);
  }
  t_device = device;
  EnsureContext(device);  // as CUDA 12 and later do
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* t = FindError(error);
  return t != nullptr ? t->name : "unrecognized error code";
}

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* t = FindError(error);
  return t != nullptr ? t->text : "unrecognized error code";
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (v == nullptr) return Ret(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return Ret(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Ret(cudaErrorInvalidValue);
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  if (device < 0 || device >= Cfg().devices) {
    return Ret(cudaErrorInvalidDevice);
  }
  const int phys = Cfg().physical[device];
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "dkgpusim device %d", phys);
  std::memcpy(prop->uuid.bytes, "dkgpusim", 8);
  prop->uuid.bytes[15] = static_cast<char>(phys);
  prop->totalGlobalMem = kDeviceMemory;
  prop->sharedMemPerBlock = 48 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 8;
  prop->concurrentKernels = 1;
  prop->pciBusID = 0x10 + phys;
  prop->asyncEngineCount = 2;
  prop->unifiedAddressing = 1;
  prop->canMapHostMemory = 1;
  prop->maxThreadsPerMultiProcessor = 2048;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr,
                                   int device) {
  if (value == nullptr) return Ret(cudaErrorInvalidValue);
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  if (device < 0 || device >= Cfg().devices) {
    return Ret(cudaErrorInvalidDevice);
  }
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = 8;
      return cudaSuccess;
    case cudaDevAttrWarpSize:
      *value = 32;
      return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      return cudaSuccess;
    case cudaDevAttrPciBusId:
      *value = 0x10 + Cfg().physical[device];
      return cudaSuccess;
    case cudaDevAttrPciDeviceId:
    case cudaDevAttrPciDomainId:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrUnifiedAddressing:
    case cudaDevAttrConcurrentKernels:
      *value = 1;
      return cudaSuccess;
    default:
      return Ret(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  if (ptr == nullptr) return Ret(cudaErrorInvalidValue);
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return Ret(e);
  DeviceState& d = Dev(cur);
  d.mallocs.fetch_add(1);
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  if (size > kDeviceMemory || d.bytes.load() + size > kDeviceMemory) {
    return Ret(cudaErrorMemoryAllocation);
  }
  const size_t rounded = (size + kPage - 1) / kPage * kPage;
  Allocation* a = new Allocation;
  a->size = size;
  a->reserved = rounded + kPage;  // and a guard page
  a->device = cur;
  // What the host sees: an address range it cannot read or write.
  void* base = mmap(nullptr, a->reserved, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  // What the simulated device reads and writes.
  void* internal = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED || internal == MAP_FAILED) {
    if (base != MAP_FAILED) munmap(base, a->reserved);
    if (internal != MAP_FAILED) munmap(internal, rounded);
    delete a;
    return Ret(cudaErrorMemoryAllocation);
  }
  // New device memory holds garbage, not zeros (NaN as floats, -1 as ints).
  std::memset(internal, 0xff, size);
  a->base = reinterpret_cast<uintptr_t>(base);
  a->internal = static_cast<char*>(internal);
  a->internal_bytes = rounded;
  {
    std::lock_guard<std::mutex> g(g_mem_mu);
    Allocations()[a->base] = a;
  }
  d.live.fetch_add(1);
  d.bytes.fetch_add(size);
  *ptr = base;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return Ret(e);
  if (p == nullptr) return cudaSuccess;
  int device = -1;
  {
    std::lock_guard<std::mutex> g(g_mem_mu);
    Allocation* a = FindAllocation(p);
    if (a == nullptr || a->base != reinterpret_cast<uintptr_t>(p)) {
      Print(
          "cudaFree(%p): not the start of a cudaMalloc allocation "
          "(cudaErrorInvalidValue)",
          p);
      return Ret(cudaErrorInvalidValue);
    }
    if (a->freed) {
      Print("cudaFree(%p): freed twice (cudaErrorInvalidValue)", p);
      return Ret(cudaErrorInvalidValue);
    }
    device = a->device;
  }
  // cudaFree waits for the device's work, as the real one does.
  SynchronizeDevice(device);
  if (device != cur) SynchronizeDevice(cur);
  std::lock_guard<std::mutex> g(g_mem_mu);
  Allocation* a = FindAllocation(p);
  if (a == nullptr || a->freed) return Ret(cudaErrorInvalidValue);
  a->freed = true;
  munmap(a->internal, a->internal_bytes);
  a->internal = nullptr;
  Dev(a->device).live.fetch_sub(1);
  Dev(a->device).bytes.fetch_sub(a->size);
  auto& q = Quarantine();
  q.push_back(a);
  if (q.size() > kQuarantine) {
    Allocation* old = q.front();
    q.pop_front();
    Allocations().erase(old->base);
    munmap(reinterpret_cast<void*>(old->base), old->reserved);
    delete old;
  }
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr || (flags & ~0xfu) != 0) return Ret(cudaErrorInvalidValue);
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return Ret(e);
  const size_t bytes = std::max<size_t>(size, 1);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return Ret(cudaErrorMemoryAllocation);
  {
    std::lock_guard<std::mutex> g(g_mem_mu);
    Pinned()[reinterpret_cast<uintptr_t>(p)] = PinnedAllocation{bytes, cur};
  }
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* p) {
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return Ret(e);
  if (p == nullptr) return cudaSuccess;
  size_t size = 0;
  int device = cur;
  {
    std::lock_guard<std::mutex> g(g_mem_mu);
    auto it = Pinned().find(reinterpret_cast<uintptr_t>(p));
    if (it == Pinned().end()) {
      Print(
          "cudaFreeHost(%p): not from cudaMallocHost/cudaHostAlloc "
          "(cudaErrorInvalidValue)",
          p);
      return Ret(cudaErrorInvalidValue);
    }
    size = it->second.size;
    device = it->second.device;
  }
  // Like cudaFree, cudaFreeHost waits for all of the device's work (every
  // stream's, NCCL's operations included) before it returns.
  SynchronizeDevice(cur);
  if (device != cur) SynchronizeDevice(device);
  {
    std::lock_guard<std::mutex> g(g_mem_mu);
    auto it = Pinned().find(reinterpret_cast<uintptr_t>(p));
    if (it == Pinned().end()) return Ret(cudaErrorInvalidValue);
    Pinned().erase(it);
  }
  munmap(p, size);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  if (free_bytes == nullptr || total == nullptr) {
    return Ret(cudaErrorInvalidValue);
  }
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return Ret(e);
  *total = kDeviceMemory;
  *free_bytes = kDeviceMemory - Dev(cur).bytes.load();
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr,
                                     const void* p) {
  if (attr == nullptr) return Ret(cudaErrorInvalidValue);
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  std::memset(attr, 0, sizeof(*attr));
  int device = -1;
  switch (Classify(p, &device)) {
    case PtrKind::kDevice:
      attr->type = cudaMemoryTypeDevice;
      attr->device = device;
      attr->devicePointer = const_cast<void*>(p);
      break;
    case PtrKind::kPinned:
      attr->type = cudaMemoryTypeHost;
      attr->device = device;
      attr->devicePointer = const_cast<void*>(p);
      attr->hostPointer = const_cast<void*>(p);
      break;
    default:
      attr->type = cudaMemoryTypeUnregistered;
      attr->device = -2;
      break;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count,
                       cudaMemcpyKind kind) {
  return Ret(Memcpy(dst, src, count, kind, nullptr, false, "cudaMemcpy"));
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count,
                            cudaMemcpyKind kind, cudaStream_t stream) {
  return Ret(Memcpy(dst, src, count, kind, stream, true, "cudaMemcpyAsync"));
}

cudaError_t cudaMemset(void* p, int value, size_t count) {
  return Ret(Memset(p, value, count, nullptr, false, "cudaMemset"));
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t count,
                            cudaStream_t stream) {
  return Ret(Memset(p, value, count, stream, true, "cudaMemsetAsync"));
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return Ret(CreateStream(stream, cudaStreamDefault));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream,
                                      unsigned int flags) {
  return Ret(CreateStream(stream, flags));
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  Stream* s = reinterpret_cast<Stream*>(stream);
  {
    std::lock_guard<std::mutex> g(g_handles_mu);
    if (IsLegacyHandle(stream) || stream == cudaStreamPerThread ||
        LiveStreams().erase(s) == 0) {
      return Ret(cudaErrorInvalidResourceHandle);
    }
  }
  // Its queued work still runs; the worker ends when it is drained.
  DestroyStream(s);
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (flags == nullptr) return Ret(cudaErrorInvalidValue);
  Stream* s = nullptr;
  if (cudaError_t e = ResolveStream(stream, &s); e != cudaSuccess) {
    return Ret(e);
  }
  *flags = s->flags;
  return cudaSuccess;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (device == nullptr) return Ret(cudaErrorInvalidValue);
  Stream* s = nullptr;
  if (cudaError_t e = ResolveStream(stream, &s); e != cudaSuccess) {
    return Ret(e);
  }
  *device = s->device;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Stream* s = nullptr;
  if (cudaError_t e = ResolveStream(stream, &s); e != cudaSuccess) {
    return Ret(e);
  }
  WaitFor(s, Enqueued(s));
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Stream* s = nullptr;
  if (cudaError_t e = ResolveStream(stream, &s); e != cudaSuccess) {
    return Ret(e);
  }
  return s->completed.load() >= Enqueued(s) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags) {
  Stream* s = nullptr;
  if (cudaError_t e = ResolveStream(stream, &s); e != cudaSuccess) {
    return Ret(e);
  }
  Event* ev = LookupEvent(event);
  if (ev == nullptr || (flags & ~1u) != 0) {
    return Ret(ev == nullptr ? cudaErrorInvalidResourceHandle
                             : cudaErrorInvalidValue);
  }
  Stream* on = nullptr;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> g(ev->mu);
    on = ev->stream;
    seq = ev->seq;
  }
  if (on == nullptr) return cudaSuccess;  // never recorded: nothing to wait
  Enqueue(s, nullptr, {{on, seq}}, false);
  return cudaSuccess;
}

namespace {
// dksimFailEventCreate's countdown: -1 when disarmed.
std::atomic<long> g_fail_event_create{-1};

// Whether this event creation is the one dksimFailEventCreate chose.
bool FailThisEventCreate() {
  for (long k = g_fail_event_create.load(); k >= 0;) {
    if (!g_fail_event_create.compare_exchange_weak(k, k - 1)) continue;
    if (k != 0) return false;
    Print(
        "cudaEventCreate: failed on purpose (dksimFailEventCreate): "
        "cudaErrorMemoryAllocation");
    return true;
  }
  return false;
}
}  // namespace

extern "C" void dksimFailEventCreate(long skip) {
  g_fail_event_create.store(skip);
}

// Streams created (cudaStreamCreate*) and not yet destroyed.
extern "C" long dksimLiveStreams(void) {
  std::lock_guard<std::mutex> g(g_handles_mu);
  return static_cast<long>(LiveStreams().size());
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (FailThisEventCreate()) return Ret(cudaErrorMemoryAllocation);
  return Ret(CreateEvent(event, cudaEventDefault));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (FailThisEventCreate()) return Ret(cudaErrorMemoryAllocation);
  return Ret(CreateEvent(event, flags));
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  Event* ev = reinterpret_cast<Event*>(event);
  std::lock_guard<std::mutex> g(g_handles_mu);
  if (LiveEvents().erase(ev) == 0) {
    return Ret(cudaErrorInvalidResourceHandle);
  }
  // Kept a while so that a stale handle is recognized as dead.
  auto& dead = DeadEvents();
  dead.push_back(ev);
  if (dead.size() > kDeadEvents) {
    delete dead.front();
    dead.pop_front();
  }
  return cudaSuccess;
}

// A long kernel, as torch.cuda._sleep is on a GPU: `us` microseconds of
// work on `stream` (its usual rules: the legacy stream's too). Work that
// should follow the stream but runs on another one then runs first every
// time, not only when the random delays happen to say so.
extern "C" cudaError_t dksimStreamSleep(cudaStream_t stream, long us) {
  if (us < 0) return Ret(cudaErrorInvalidValue);
  Stream* s = nullptr;
  if (cudaError_t e = ResolveStream(stream, &s); e != cudaSuccess) {
    return Ret(e);
  }
  Enqueue(
      s, [us] { std::this_thread::sleep_for(std::chrono::microseconds(us)); },
      {}, false);
  return cudaSuccess;
}

namespace {
// dksimFailEventRecord's countdown: -1 when disarmed.
std::atomic<long> g_fail_event_record{-1};
}  // namespace

extern "C" void dksimFailEventRecord(long skip) {
  g_fail_event_record.store(skip);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  for (long k = g_fail_event_record.load(); k >= 0;) {
    if (!g_fail_event_record.compare_exchange_weak(k, k - 1)) continue;
    if (k == 0) {
      Print(
          "cudaEventRecord: failed on purpose (dksimFailEventRecord): "
          "cudaErrorLaunchFailure");
      return Ret(cudaErrorLaunchFailure);
    }
    break;
  }
  Event* ev = LookupEvent(event);
  if (ev == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  Stream* s = nullptr;
  if (cudaError_t e = ResolveStream(stream, &s); e != cudaSuccess) {
    return Ret(e);
  }
  if (s->device != ev->device) {
    Print(
        "cudaEventRecord: event of device %d recorded on a stream of "
        "device %d (cudaErrorInvalidResourceHandle)",
        ev->device, s->device);
    return Ret(cudaErrorInvalidResourceHandle);
  }
  auto when = std::make_shared<std::atomic<int64_t>>(0);
  // A marker in the stream: the legacy stream rules apply to it too.
  const uint64_t seq = Enqueue(
      s, [when] { when->store(NowNs()); }, {}, false);
  std::lock_guard<std::mutex> g(ev->mu);
  ev->stream = s;
  ev->seq = seq;
  ev->when = when;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  Event* ev = LookupEvent(event);
  if (ev == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> g(ev->mu);
  if (ev->stream == nullptr) return cudaSuccess;
  return ev->stream->completed.load() >= ev->seq ? cudaSuccess
                                                 : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (cudaError_t e = Usable(); e != cudaSuccess) return Ret(e);
  Event* ev = LookupEvent(event);
  if (ev == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  Stream* s = nullptr;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> g(ev->mu);
    s = ev->stream;
    seq = ev->seq;
  }
  if (s != nullptr) WaitFor(s, seq);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  if (ms == nullptr) return Ret(cudaErrorInvalidValue);
  Event* a = LookupEvent(start);
  Event* b = LookupEvent(end);
  if (a == nullptr || b == nullptr) return Ret(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) {
    return Ret(cudaErrorInvalidResourceHandle);
  }
  std::shared_ptr<std::atomic<int64_t>> ta, tb;
  {
    std::lock_guard<std::mutex> g(a->mu);
    ta = a->when;
  }
  {
    std::lock_guard<std::mutex> g(b->mu);
    tb = b->when;
  }
  if (ta == nullptr || tb == nullptr) {
    return Ret(cudaErrorInvalidResourceHandle);
  }
  if (ta->load() == 0 || tb->load() == 0) return cudaErrorNotReady;
  *ms = static_cast<float>(tb->load() - ta->load()) / 1e6f;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  int cur = 0;
  if (cudaError_t e = NeedDevice(&cur); e != cudaSuccess) return Ret(e);
  SynchronizeDevice(cur);
  return cudaSuccess;
}

// ---- Introspection for tests ----------------------------------------------

// Bit d: this process created a context on device d.
unsigned dksimContextMask(void) { return g_context_mask.load(); }

// The driver API's question whether a device's primary context exists in
// this process (libcuda's; CUresult and CUdevice are ints): what a caller
// asks before it switches back to a device, so as not to create one there.
int cuDevicePrimaryCtxGetState(int dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr)
    return 1;                            // CUDA_ERROR_INVALID_VALUE
  if (dev < 0 || dev >= 32) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *flags = 0;
  *active = (g_context_mask.load() >> dev) & 1u;
  return 0;
}

// cudaMalloc calls on `device` so far (successful or not); -1 for no such
// device.
long dksimMallocCount(int device) {
  if (device < 0 || device >= Cfg().devices) return -1;
  return Dev(device).mallocs.load();
}

// cudaMalloc allocations on `device` not yet freed.
long dksimLiveAllocations(int device) {
  if (device < 0 || device >= Cfg().devices) return -1;
  return Dev(device).live.load();
}

// The seed delays are drawn from (DKSIM_SEED or the one printed at load).
unsigned long long dksimSeed(void) { return Cfg().seed; }

// Copies (cudaMemcpy, cudaMemcpyAsync) with device memory on a side, made by
// this process so far: `direction` 1 host to device, 2 device to host, 3
// device to device; -1 for another direction.
long dksimCopyCount(int direction) {
  if (direction < kToDevice || direction > kDeviceToDevice) return -1;
  return g_copies[direction].load();
}

// Memsets (cudaMemset, cudaMemsetAsync) of device memory made by this
// process so far.
long dksimMemsetCount(void) { return g_memsets.load(); }

}  // extern "C"
