// dkgpusim's NCCL: communicators across processes through a POSIX shared
// memory segment named by the unique id. Every operation runs on its
// stream's worker thread (sim_cuda.cc), where it meets the other ranks'
// operation of the same number in the segment.
//
// Segment layout (one per communicator): a header with one record per rank
// (pid, device, progress counter, the current collective's description), a
// staging slot per rank for collectives, and a byte ring per ordered pair
// of ranks for send/recv. Waiters sleep on a futex in the header that every
// change bumps. Each rank holds an OFD lock on one byte of the segment
// while it is attached: the kernel drops it when the process dies, which is
// how peers tell a dead rank from a slow one (kill(pid, 0) cannot: a dead
// child stays a zombie until reaped).

#include <fcntl.h>
#include <linux/futex.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/gpu_sim/sim_internal.h"
#include "testing/gpu_sim/sim_numeric.h"

namespace dksim {
namespace {

constexpr int kMaxRanks = 64;
constexpr size_t kSlotBytes = size_t{1} << 20;   // collective staging, per rank
constexpr size_t kChanBytes = size_t{64} << 10;  // send/recv ring, per pair
constexpr size_t kPage = 4096;
constexpr char kIdMagic[8] = {'d', 'k', 'g', 'p', 'u', 's', 'i', 'm'};
constexpr uint64_t kCommMagic = 0x636f6d6d6b736964ULL;
constexpr int64_t kCheckNs = 20 * 1000 * 1000;  // peer liveness, every 20 ms
constexpr int kPremulFirst = ncclNumOps;

enum Kind : int32_t {
  kAllReduce = 1,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kSend,
  kRecv,
};

const char* KindName(int k) {
  switch (k) {
    case kAllReduce:
      return "ncclAllReduce";
    case kBroadcast:
      return "ncclBroadcast";
    case kReduce:
      return "ncclReduce";
    case kAllGather:
      return "ncclAllGather";
    case kReduceScatter:
      return "ncclReduceScatter";
    case kSend:
      return "ncclSend";
    case kRecv:
      return "ncclRecv";
  }
  return "?";
}

// NCCL's built-in reductions, indexed by ncclRedOp_t: name and arithmetic.
struct BuiltinOp {
  const char* name;
  RedKind red;
};
constexpr BuiltinOp kBuiltinOps[] = {{"ncclSum", RedKind::kSum},
                                     {"ncclProd", RedKind::kProd},
                                     {"ncclMax", RedKind::kMax},
                                     {"ncclMin", RedKind::kMin},
                                     {"ncclAvg", RedKind::kAvg}};
static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 &&
                  ncclAvg == 4 && ncclNumOps == 5,
              "kBuiltinOps follows ncclRedOp_t");

bool IsBuiltin(int op) { return op >= 0 && op < ncclNumOps; }

const char* OpName(int op) {
  if (IsBuiltin(op)) return kBuiltinOps[op].name;
  return op >= kPremulFirst ? "a PreMulSum" : "an invalid ncclRedOp_t";
}

// Rank states in the segment.
enum RankState : uint32_t { kLive = 0, kAborted, kLeft, kFailed, kDead };

// What a rank says about its current collective (compared across ranks).
struct OpDesc {
  int32_t kind, dtype, op, root;
  uint64_t count;
};

struct alignas(64) RankRec {
  std::atomic<uint32_t> joined;  // 0; 1 joining; 2 joined
  std::atomic<uint32_t> state;   // RankState
  int32_t pid, device, phys, pad;
  // Collective progress: ((collective number + 1) << 32) | stage.
  std::atomic<uint64_t> step;
  OpDesc desc[2];  // by collective number % 2
  std::atomic<uint64_t> split_posted, split_read;
  int32_t split_color, split_key;
};

struct alignas(64) ChanHdr {
  std::atomic<uint64_t> written, read;  // bytes ever, producer / consumer
};

struct SegHeader {
  alignas(64) std::atomic<uint32_t> gen;  // the futex word
  std::atomic<int32_t> nranks;
  std::atomic<uint32_t> joined_count;
  std::atomic<uint64_t> mismatch_said;  // collective number + 1
  RankRec ranks[kMaxRanks];
};

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t HeaderBytes() { return RoundUp(sizeof(SegHeader), kPage); }
size_t ChanHdrBytes(int n) { return RoundUp(n * n * sizeof(ChanHdr), kPage); }
size_t SlotOffset(int n, int r) {
  return HeaderBytes() + ChanHdrBytes(n) + r * kSlotBytes;
}
size_t ChanOffset(int n, int s, int d) {
  return SlotOffset(n, n) + (size_t(s) * n + d) * kChanBytes;
}
size_t MapBytes(int n) { return ChanOffset(n, n, 0); }
// Every rank sizes the file alike, whatever nranks it was given: sparse.
size_t FileBytes() { return MapBytes(kMaxRanks); }

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, int ms) {
  timespec ts{0, ms * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts,
          nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

pid_t Tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

struct PreMul {
  int dtype = 0;
  bool on_device = false;
  std::vector<char> host;  // ncclScalarHostImmediate: the value
  const void* device = nullptr;
};

struct Comm {
  uint64_t magic = kCommMagic;
  ncclUniqueId id;
  std::string name;  // the segment
  std::string tag;   // for messages
  int rank = 0, nranks = 0, device = 0, phys = 0;
  bool blocking = true;
  int fd = -1;
  char* base = nullptr;
  SegHeader* hdr = nullptr;
  size_t map_bytes = 0;

  std::atomic<int> async{ncclSuccess};
  std::atomic<bool> ready{false}, aborted{false}, destroyed{false};
  // This communicator's rank is in the segment (Join claimed its record:
  // not so for a second process claiming the same rank).
  std::atomic<bool> attached{false};
  std::atomic<bool> handle_released{false};
  std::atomic<int64_t> inprogress_until{0};

  // Which thread is inside a call on this communicator.
  std::atomic<pid_t> owner{0};
  std::atomic<const char*> owner_fn{nullptr};
  std::atomic<bool> owner_group{false};

  std::mutex mu;  // guards the counters below that are not atomic
  uint64_t next_launch = 0;
  std::map<uint64_t, int> launch_left;  // unfinished launches: tasks left
  std::atomic<uint64_t> launches_done{0};
  uint64_t next_coll = 0;
  std::atomic<uint64_t> coll_done{0};
  std::vector<uint64_t> next_send, next_recv;
  std::unique_ptr<std::atomic<uint64_t>[]> send_done, recv_done;
  uint64_t op_calls = 0;
  uint64_t splits = 0;
  std::map<int, PreMul> premul;
  int next_premul = kPremulFirst;

  std::atomic<int> pending{0};  // tasks queued, not finished
  std::atomic<int> refs{1};     // the handle, tasks, calls in progress
  std::atomic<bool> said_after_abort{false}, said_peer{false};
};

std::mutex g_comms_mu;
std::set<Comm*>& AllComms() {
  static auto* s = new std::set<Comm*>;
  return *s;
}

thread_local std::string t_last_message;

// Prints and keeps (for ncclGetLastError) one message; returns r.
ncclResult_t Fail(ncclResult_t r, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
ncclResult_t Fail(ncclResult_t r, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  Print("%s", buf);
  t_last_message = std::string("dkgpusim: ") + buf;
  return r;
}

Comm* Lookup(ncclComm_t h) {
  Comm* c = reinterpret_cast<Comm*>(h);
  std::lock_guard<std::mutex> g(g_comms_mu);
  return AllComms().count(c) ? c : nullptr;
}

void Release(Comm* c) {
  if (c->refs.fetch_sub(1) == 1) {
    if (c->base != nullptr) munmap(c->base, c->map_bytes);
    if (c->fd >= 0) close(c->fd);  // drops this rank's liveness lock
    c->base = nullptr;
    c->hdr = nullptr;
    c->fd = -1;
  }
}

// A reference for the length of a call; fails once the handle is gone.
bool TryAcquire(Comm* c) {
  int r = c->refs.load();
  do {
    if (r == 0) return false;
  } while (!c->refs.compare_exchange_weak(r, r + 1));
  return true;
}

class CommRef {
 public:
  explicit CommRef(Comm* c) : c_(TryAcquire(c) ? c : nullptr) {}
  ~CommRef() {
    if (c_ != nullptr) Release(c_);
  }
  bool ok() const { return c_ != nullptr; }

 private:
  Comm* c_;
};

void ReleaseHandle(Comm* c) {
  if (!c->handle_released.exchange(true)) Release(c);
}

RankRec& Rec(Comm* c, int r) { return c->hdr->ranks[r]; }

void Wake(Comm* c) {
  if (c->hdr == nullptr) return;
  c->hdr->gen.fetch_add(1);
  FutexWakeAll(&c->hdr->gen);
}

// ---- Groups and the one-thread-per-communicator rule ---------------------

struct Task;
struct GroupState {
  int depth = 0;
  std::vector<std::pair<Task*, Stream*>> tasks;
  std::vector<Comm*> inits;  // ncclCommInitRank calls waiting for GroupEnd
  std::vector<Comm*> owned;  // communicators this open group holds
};
thread_local GroupState t_group;

// Holds c for the calling thread during a call (and, inside ncclGroupStart,
// until ncclGroupEnd); a second thread arriving meanwhile aborts the
// process, as NCCL communicators are not thread-safe.
class Owner {
 public:
  Owner(Comm* c, const char* fn) : c_(c) {
    const pid_t me = Tid();
    pid_t cur = 0;
    if (c->owner.compare_exchange_strong(cur, me)) {
      acquired_ = true;
      c->owner_fn.store(fn);
      c->owner_group.store(false);
      return;
    }
    if (cur == me) return;  // this thread's open group holds it
    const char* other = c->owner_fn.load();
    Fatal(
        "%s on communicator %s called from thread %d while thread %d is "
        "inside %s%s; NCCL communicators are not thread-safe",
        fn, c->tag.c_str(), static_cast<int>(me), static_cast<int>(cur),
        other != nullptr ? other : "an NCCL call",
        c->owner_group.load()
            ? " (its ncclGroupStart is still open: the group holds the "
              "communicator until ncclGroupEnd)"
            : "");
  }
  ~Owner() {
    if (!acquired_) return;
    if (t_group.depth > 0) {
      c_->owner_group.store(true);
      t_group.owned.push_back(c_);
      return;
    }
    c_->owner.store(0);
  }

 private:
  Comm* c_;
  bool acquired_ = false;
};

// ---- Peers ----------------------------------------------------------------

// Why rank q cannot take part any more (kLive: it still can).
uint32_t PeerProblem(Comm* c, int q) {
  if (q == c->rank) return kLive;
  RankRec& r = Rec(c, q);
  const uint32_t st = r.state.load();
  if (st != kLive) return st;
  if (r.joined.load() != 2) return kLive;
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = q;
  fl.l_len = 1;
  if (fcntl(c->fd, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK) {
    return kDead;
  }
  return kLive;
}

const char* ProblemText(uint32_t why) {
  switch (why) {
    case kAborted:
      return "aborted its communicator";
    case kLeft:
      return "destroyed its communicator";
    case kFailed:
      return "failed to initialize";
    case kDead:
      return "exited";
  }
  return "is live";
}

void PeerFailed(Comm* c, int q, uint32_t why, const char* during) {
  int expected = ncclSuccess;
  if (!c->async.compare_exchange_strong(expected, ncclRemoteError) &&
      expected == ncclInProgress) {
    c->async.compare_exchange_strong(expected, ncclRemoteError);
  }
  if (!c->said_peer.exchange(true)) {
    Print(
        "communicator %s: rank %d (pid %d) %s while rank %d waits for it "
        "in %s; ncclCommGetAsyncError now reports ncclRemoteError",
        c->tag.c_str(), q, Rec(c, q).pid, ProblemText(why), c->rank, during);
  }
  Wake(c);
}

// Waits (on the calling thread) until ready(q) for every other rank q.
ncclResult_t WaitAll(Comm* c, const std::function<bool(int)>& ready,
                     const char* during) {
  int64_t next_check = NowNs() + kCheckNs;
  for (;;) {
    const uint32_t seen = c->hdr->gen.load();
    std::vector<int> missing;
    for (int q = 0; q < c->nranks; ++q) {
      if (q != c->rank && !ready(q)) missing.push_back(q);
    }
    if (missing.empty()) return ncclSuccess;
    if (c->aborted.load()) return ncclSystemError;
    const int a = c->async.load();
    if (a != ncclSuccess && a != ncclInProgress) return ncclRemoteError;
    if (NowNs() >= next_check) {
      for (int q : missing) {
        if (const uint32_t why = PeerProblem(c, q)) {
          PeerFailed(c, q, why, during);
          return ncclRemoteError;
        }
      }
      next_check = NowNs() + kCheckNs;
    }
    FutexWait(&c->hdr->gen, seen, 20);
  }
}

// ---- Initialization -------------------------------------------------------

std::string Hex(const char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[(p[i] >> 4) & 15];
    s += digits[p[i] & 15];
  }
  return s;
}

// Attaches to the segment and announces this rank (does not wait).
ncclResult_t Join(Comm* c) {
  c->fd = shm_open(c->name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (c->fd < 0) {
    return Fail(ncclSystemError, "ncclCommInitRank: shm_open(%s): %s",
                c->name.c_str(), std::strerror(errno));
  }
  struct stat st;
  if (fstat(c->fd, &st) != 0 ||
      (static_cast<size_t>(st.st_size) < FileBytes() &&
       ftruncate(c->fd, FileBytes()) != 0)) {
    return Fail(ncclSystemError, "ncclCommInitRank: sizing %s: %s",
                c->name.c_str(), std::strerror(errno));
  }
  c->map_bytes = MapBytes(c->nranks);
  void* p =
      mmap(nullptr, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
  if (p == MAP_FAILED) {
    return Fail(ncclSystemError, "ncclCommInitRank: mmap: %s",
                std::strerror(errno));
  }
  c->base = static_cast<char*>(p);
  c->hdr = reinterpret_cast<SegHeader*>(p);
  int32_t n = 0;
  if (!c->hdr->nranks.compare_exchange_strong(n, c->nranks) && n != c->nranks) {
    return Fail(ncclInvalidArgument,
                "ncclCommInitRank: rank %d says the communicator has %d "
                "ranks, another rank said %d",
                c->rank, c->nranks, n);
  }
  RankRec& me = Rec(c, c->rank);
  uint32_t zero = 0;
  if (!me.joined.compare_exchange_strong(zero, 1)) {
    return Fail(ncclInvalidUsage,
                "ncclCommInitRank: rank %d of communicator %s initialized "
                "twice",
                c->rank, c->tag.c_str());
  }
  struct flock fl;
  std::memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = c->rank;
  fl.l_len = 1;
  if (fcntl(c->fd, F_OFD_SETLK, &fl) != 0) {
    return Fail(ncclSystemError, "ncclCommInitRank: locking rank %d: %s",
                c->rank, std::strerror(errno));
  }
  me.pid = getpid();
  me.device = c->device;
  me.phys = c->phys;
  me.joined.store(2);
  c->attached.store(true);
  c->hdr->joined_count.fetch_add(1);
  Wake(c);
  return ncclSuccess;
}

// A communicator whose initialization failed or was aborted after its rank
// attached (a peer never came) leaves no segment behind: FinishInit
// unlinks it only once every rank is in. A rank that comes later makes a
// new one and waits there until it is aborted. Not for a rank that was
// refused before attaching (a second claim of a rank, a disagreeing rank
// count): the others may still meet.
void UnlinkUnfinished(Comm* c) {
  if (c->attached.load() && !c->ready.load()) shm_unlink(c->name.c_str());
}

// Waits for every rank, then applies NCCL's rule of one rank per device.
ncclResult_t FinishInit(Comm* c) {
  ncclResult_t r = WaitAll(
      c, [c](int q) { return Rec(c, q).joined.load() == 2; },
      "ncclCommInitRank");
  if (r != ncclSuccess) return r;
  shm_unlink(c->name.c_str());  // everyone is attached: no litter
  for (int q = 0; q < c->nranks; ++q) {
    if (q != c->rank && Rec(c, q).phys == c->phys) {
      return Fail(ncclInvalidUsage,
                  "ncclCommInitRank: ranks %d and %d of communicator %s are "
                  "both on CUDA device %d; NCCL refuses two ranks of one "
                  "communicator on one device (Duplicate GPU detected)",
                  std::min(q, c->rank), std::max(q, c->rank), c->tag.c_str(),
                  c->phys);
    }
  }
  return ncclSuccess;
}

void InitDone(Comm* c, ncclResult_t r) {
  if (r == ncclSuccess) {
    c->ready.store(true);
  } else if (c->attached.load()) {
    Rec(c, c->rank).state.store(kFailed);
    Wake(c);
    UnlinkUnfinished(c);
  }
  int expected = ncclInProgress;
  if (!c->async.compare_exchange_strong(expected, r) && r != ncclSuccess) {
    c->async.store(r);
  }
}

// The whole of one rank's initialization, its outcome recorded.
ncclResult_t RunInit(Comm* c) {
  ncclResult_t r = Join(c);
  if (r == ncclSuccess) r = FinishInit(c);
  InitDone(c, r);
  return r;
}

// A non-blocking communicator's initialization, on a thread that holds a
// reference until it is done.
void InitInBackground(Comm* c) {
  c->refs.fetch_add(1);
  std::thread([c] {
    RunInit(c);
    Release(c);
  }).detach();
}

Comm* NewComm(const ncclUniqueId& id, int nranks, int rank, int device,
              bool blocking) {
  Comm* c = new Comm;
  c->id = id;
  c->name = "/dkgpusim-" + Hex(id.internal + 8, 16);
  c->nranks = nranks;
  c->rank = rank;
  c->device = device;
  c->phys = Cfg().physical[device];
  c->blocking = blocking;
  c->next_send.assign(nranks, 0);
  c->next_recv.assign(nranks, 0);
  c->send_done.reset(new std::atomic<uint64_t>[nranks]);
  c->recv_done.reset(new std::atomic<uint64_t>[nranks]);
  for (int q = 0; q < nranks; ++q) {
    c->send_done[q].store(0);
    c->recv_done[q].store(0);
  }
  char tag[96];
  std::snprintf(tag, sizeof(tag), "%p (rank %d of %d, %s)",
                static_cast<void*>(c), rank, nranks,
                Hex(id.internal + 8, 4).c_str());
  c->tag = tag;
  std::lock_guard<std::mutex> g(g_comms_mu);
  AllComms().insert(c);
  return c;
}

bool ConfigBlocking(const ncclConfig_t* config, bool fallback) {
  if (config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT) {
    return fallback;
  }
  return config->blocking != 0;
}

ncclResult_t InitRank(ncclComm_t* out, int nranks, const ncclUniqueId& id,
                      int rank, const ncclConfig_t* config, int device,
                      bool default_blocking, const char* fn) {
  if (out == nullptr) return Fail(ncclInvalidArgument, "%s: comm is NULL", fn);
  *out = nullptr;
  if (ForkedAfterInit()) {
    return Fail(ncclUnhandledCudaError,
                "%s in a process forked after its parent used CUDA", fn);
  }
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) {
    return Fail(ncclInvalidArgument,
                "%s: rank %d of %d ranks (dkgpusim supports 1 to %d)", fn, rank,
                nranks, kMaxRanks);
  }
  if (std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0) {
    return Fail(ncclInvalidArgument,
                "%s: the unique id does not come from ncclGetUniqueId", fn);
  }
  if (config != nullptr && config->magic != 0xcafebeef) {
    return Fail(ncclInvalidArgument,
                "%s: config was not initialized with NCCL_CONFIG_INITIALIZER",
                fn);
  }
  if (device < 0) {
    if (Cfg().devices == 0) {
      return Fail(ncclUnhandledCudaError, "%s: no CUDA device", fn);
    }
    device = CurrentDevice();
  }
  EnsureContext(device);
  const bool blocking = ConfigBlocking(config, default_blocking);
  Comm* c = NewComm(id, nranks, rank, device, blocking);
  *out = reinterpret_cast<ncclComm_t>(c);
  if (t_group.depth > 0) {
    c->async.store(ncclInProgress);
    t_group.inits.push_back(c);
    return ncclSuccess;
  }
  if (!blocking) {
    c->async.store(ncclInProgress);
    InitInBackground(c);
    return ncclInProgress;
  }
  const ncclResult_t r = RunInit(c);
  if (r != ncclSuccess) {
    ReleaseHandle(c);
    *out = nullptr;
  }
  return r;
}

// Whether c can take a new call: ready, not failed, not mid-ncclInProgress.
ncclResult_t CheckUsable(Comm* c, const char* fn) {
  if (c->aborted.load() || c->destroyed.load()) {
    if (!c->said_after_abort.exchange(true)) {
      Fail(ncclInvalidUsage,
           "%s on communicator %s after ncclComm%s (the real NCCL has freed "
           "it)",
           fn, c->tag.c_str(), c->aborted.load() ? "Abort" : "Destroy");
    }
    return ncclInvalidUsage;
  }
  const int a = c->async.load();
  if (a == ncclInProgress) {
    return Fail(ncclInvalidUsage,
                "%s on communicator %s while ncclCommGetAsyncError still says "
                "ncclInProgress (poll it until the earlier call completes)",
                fn, c->tag.c_str());
  }
  if (a != ncclSuccess) return static_cast<ncclResult_t>(a);
  if (!c->ready.load()) {
    return Fail(ncclInvalidUsage,
                "%s on communicator %s, which is not "
                "initialized",
                fn, c->tag.c_str());
  }
  return ncclSuccess;
}

// DKSIM_NCCL_INPROGRESS: a non-blocking communicator's call reports
// ncclInProgress and stays in progress a little while.
ncclResult_t MaybeInProgress(Comm* c) {
  if (c->blocking || !Cfg().nccl_inprogress) return ncclSuccess;
  c->inprogress_until.store(NowNs() + 100000 +
                            static_cast<int64_t>(RandomBelow(2000000)));
  int expected = ncclSuccess;
  c->async.compare_exchange_strong(expected, ncclInProgress);
  return ncclInProgress;
}

// ---- Operations -----------------------------------------------------------

enum Progress { kBlocked, kMoved, kDone };

struct Task {
  Comm* c = nullptr;
  Kind kind = kAllReduce;
  const char* send = nullptr;  // device addresses as the caller gave them
  char* recv = nullptr;
  size_t count = 0;
  int dtype = 0;
  int op = ncclSum;
  RedKind red = RedKind::kSum;
  int root = 0;  // or the peer of a send/recv
  bool premul = false;
  std::vector<char> scalar;  // host immediate
  const void* scalar_dev = nullptr;
  uint64_t launch = 0, seq = 0;
  bool hang = false;

  int phase = 0;
  size_t chunk = 0, nchunks = 0, chunk_elems = 0, moved = 0;
  bool done = false;
  std::vector<int> waiting;  // ranks this task is blocked on
};

void Finish(Task* t, ncclResult_t r) {
  Comm* c = t->c;
  t->done = true;
  if (r != ncclSuccess) {
    int expected = ncclSuccess;
    c->async.compare_exchange_strong(expected, r);
  }
  auto raise = [](std::atomic<uint64_t>& a, uint64_t v) {
    uint64_t cur = a.load();
    while (cur < v && !a.compare_exchange_weak(cur, v)) {
    }
  };
  if (t->kind == kSend) {
    raise(c->send_done[t->root], t->seq + 1);
  } else if (t->kind == kRecv) {
    raise(c->recv_done[t->root], t->seq + 1);
  } else {
    raise(c->coll_done, t->seq + 1);
  }
  {
    std::lock_guard<std::mutex> g(c->mu);
    auto it = c->launch_left.find(t->launch);
    if (it != c->launch_left.end() && --it->second == 0) {
      c->launch_left.erase(it);
    }
    c->launches_done.store(c->launch_left.empty()
                               ? c->next_launch
                               : c->launch_left.begin()->first);
  }
  Wake(c);
  {
    std::lock_guard<std::mutex> g(DoneMutex());
    c->pending.fetch_sub(1);
  }
  DoneCv().notify_all();
}

// Rank me's collective-step target check: fills t->waiting.
bool AllAt(Task* t, uint64_t target) {
  Comm* c = t->c;
  t->waiting.clear();
  for (int q = 0; q < c->nranks; ++q) {
    if (q != c->rank && Rec(c, q).step.load() < target) t->waiting.push_back(q);
  }
  return t->waiting.empty();
}

std::string Describe(const OpDesc& d) {
  char buf[160];
  if (d.kind == kAllGather || d.kind == kBroadcast) {
    std::snprintf(buf, sizeof(buf), "%s(count %llu, %s%s)", KindName(d.kind),
                  static_cast<unsigned long long>(d.count), TypeName(d.dtype),
                  d.kind == kBroadcast
                      ? (", root " + std::to_string(d.root)).c_str()
                      : "");
  } else {
    std::snprintf(
        buf, sizeof(buf), "%s(count %llu, %s, %s%s)", KindName(d.kind),
        static_cast<unsigned long long>(d.count), TypeName(d.dtype),
        OpName(d.op),
        d.kind == kReduce ? (", root " + std::to_string(d.root)).c_str() : "");
  }
  return buf;
}

bool SameOp(const OpDesc& a, const OpDesc& b) {
  const bool a_pre = a.op >= kPremulFirst, b_pre = b.op >= kPremulFirst;
  return a.kind == b.kind && a.dtype == b.dtype && a.count == b.count &&
         a.root == b.root && (a_pre ? b_pre : a.op == b.op);
}

char* Slot(Comm* c, int r) { return c->base + SlotOffset(c->nranks, r); }

// Copies n elements of this rank's input into the staging slot, scaled for
// a PreMulSum.
void Contribute(Task* t, const char* src, char* dst, size_t n) {
  const size_t es = TypeSize(t->dtype);
  if (!t->premul) {
    std::memcpy(dst, src, n * es);
    return;
  }
  const char* scalar = t->scalar.data();
  if (t->scalar_dev != nullptr) {
    scalar = Translate(t->scalar_dev, es, "ncclRedOpCreatePreMulSum scalar");
  }
  Scale(t->dtype, scalar, src, dst, n);
}

void Publish(Task* t) {
  Comm* c = t->c;
  const size_t es = TypeSize(t->dtype);
  const size_t b = t->chunk * t->chunk_elems;
  const size_t m = std::min(t->count, b + t->chunk_elems) - b;
  const char* what = KindName(t->kind);
  char* slot = Slot(c, c->rank);
  switch (t->kind) {
    case kAllReduce:
    case kReduce:
      Contribute(t, Translate(t->send + b * es, m * es, what), slot, m);
      break;
    case kAllGather:
      std::memcpy(slot, Translate(t->send + b * es, m * es, what), m * es);
      break;
    case kBroadcast:
      if (c->rank == t->root) {
        std::memcpy(slot, Translate(t->send + b * es, m * es, what), m * es);
      }
      break;
    case kReduceScatter:
      for (int q = 0; q < c->nranks; ++q) {
        Contribute(t,
                   Translate(t->send + (q * t->count + b) * es, m * es, what),
                   slot + q * t->chunk_elems * es, m);
      }
      break;
    default:
      break;
  }
}

void Consume(Task* t) {
  Comm* c = t->c;
  const int n = c->nranks;
  const size_t es = TypeSize(t->dtype);
  const size_t b = t->chunk * t->chunk_elems;
  const size_t m = std::min(t->count, b + t->chunk_elems) - b;
  const char* what = KindName(t->kind);
  std::vector<const char*> in(n);
  for (int q = 0; q < n; ++q) in[q] = Slot(c, q);
  switch (t->kind) {
    case kAllReduce:
      ReduceInto(t->dtype, t->red, in.data(), n,
                 Translate(t->recv + b * es, m * es, what), m);
      break;
    case kReduce:
      if (c->rank == t->root) {
        ReduceInto(t->dtype, t->red, in.data(), n,
                   Translate(t->recv + b * es, m * es, what), m);
      }
      break;
    case kBroadcast:
      std::memcpy(Translate(t->recv + b * es, m * es, what), in[t->root],
                  m * es);
      break;
    case kAllGather:
      for (int q = 0; q < n; ++q) {
        std::memcpy(Translate(t->recv + (q * t->count + b) * es, m * es, what),
                    in[q], m * es);
      }
      break;
    case kReduceScatter:
      for (int q = 0; q < n; ++q) in[q] += c->rank * t->chunk_elems * es;
      ReduceInto(t->dtype, t->red, in.data(), n,
                 Translate(t->recv + b * es, m * es, what), m);
      break;
    default:
      break;
  }
}

enum CollPhase { kTurn = 0, kEntered, kPublish, kConsume, kHung };

Progress Collective(Task* t) {
  Comm* c = t->c;
  RankRec& me = Rec(c, c->rank);
  const uint64_t k = t->seq;
  auto step = [k](uint64_t x) { return ((k + 1) << 32) | x; };
  switch (t->phase) {
    case kTurn: {
      t->waiting.clear();
      if (c->launches_done.load() < t->launch || c->coll_done.load() < k) {
        return kBlocked;
      }
      if (t->hang) return kBlocked;  // DKSIM_NCCL_HANG_*: stuck until abort
      me.desc[k & 1] = OpDesc{t->kind, t->dtype, t->op, t->root,
                              static_cast<uint64_t>(t->count)};
      me.step.store(step(0));
      Wake(c);
      t->phase = kEntered;
      return kMoved;
    }
    case kEntered: {
      if (!AllAt(t, step(0))) return kBlocked;
      const OpDesc& mine = me.desc[k & 1];
      bool same = true;
      for (int q = 0; q < c->nranks; ++q) {
        same &= SameOp(Rec(c, q).desc[k & 1], mine);
      }
      if (!same) {
        uint64_t none = 0;
        if (c->hdr->mismatch_said.compare_exchange_strong(none, k + 1)) {
          std::string all;
          for (int q = 0; q < c->nranks; ++q) {
            all += (q ? "; rank " : "rank ") + std::to_string(q) + " " +
                   Describe(Rec(c, q).desc[k & 1]);
          }
          Print(
              "mismatch on communicator %s at collective #%llu: %s. NCCL "
              "hangs here; so does dkgpusim, until the communicator is "
              "aborted",
              c->tag.c_str(), static_cast<unsigned long long>(k), all.c_str());
        }
        t->phase = kHung;
        return kMoved;
      }
      const size_t es = TypeSize(t->dtype);
      const size_t per = t->kind == kReduceScatter ? c->nranks : 1;
      t->chunk_elems = std::max<size_t>(1, kSlotBytes / (es * per));
      t->nchunks = (t->count + t->chunk_elems - 1) / t->chunk_elems;
      t->chunk = 0;
      if (t->nchunks == 0) {
        Finish(t, ncclSuccess);
        return kDone;
      }
      t->phase = kPublish;
      return kMoved;
    }
    case kPublish: {
      // Everyone must be done reading the slot's previous chunk.
      if (t->chunk > 0 && !AllAt(t, step(2 * t->chunk))) return kBlocked;
      Publish(t);
      me.step.store(step(2 * t->chunk + 1));
      Wake(c);
      t->phase = kConsume;
      return kMoved;
    }
    case kConsume: {
      if (!AllAt(t, step(2 * t->chunk + 1))) return kBlocked;
      Consume(t);
      me.step.store(step(2 * t->chunk + 2));
      Wake(c);
      if (++t->chunk == t->nchunks) {
        Finish(t, ncclSuccess);
        return kDone;
      }
      t->phase = kPublish;
      return kMoved;
    }
    case kHung:
      t->waiting.clear();
      for (int q = 0; q < c->nranks; ++q) {
        if (q != c->rank) t->waiting.push_back(q);
      }
      return kBlocked;
  }
  return kBlocked;
}

struct MsgHeader {
  uint64_t bytes;
  int32_t dtype;
  int32_t magic;
};
constexpr int32_t kMsgMagic = 0x64736d67;

ChanHdr& Chan(Comm* c, int s, int d) {
  return reinterpret_cast<ChanHdr*>(c->base + HeaderBytes())[s * c->nranks + d];
}
char* ChanData(Comm* c, int s, int d) {
  return c->base + ChanOffset(c->nranks, s, d);
}

void RingWrite(char* ring, uint64_t at, const char* src, size_t n) {
  const size_t pos = at % kChanBytes;
  const size_t first = std::min(n, kChanBytes - pos);
  std::memcpy(ring + pos, src, first);
  std::memcpy(ring, src + first, n - first);
}

void RingRead(const char* ring, uint64_t at, char* dst, size_t n) {
  const size_t pos = at % kChanBytes;
  const size_t first = std::min(n, kChanBytes - pos);
  std::memcpy(dst, ring + pos, first);
  std::memcpy(dst + first, ring, n - first);
}

Progress SendRecv(Task* t) {
  Comm* c = t->c;
  const int peer = t->root;
  const bool send = t->kind == kSend;
  const size_t bytes = t->count * TypeSize(t->dtype);
  auto blocked_on_peer = [&] {
    t->waiting.clear();
    if (peer != c->rank) t->waiting.push_back(peer);
    return kBlocked;
  };
  if (t->phase == 0) {
    t->waiting.clear();
    const auto& done = send ? c->send_done[peer] : c->recv_done[peer];
    if (c->launches_done.load() < t->launch || done.load() < t->seq) {
      return kBlocked;
    }
    if (t->hang) return kBlocked;
    t->phase = 1;
  }
  ChanHdr& ch = send ? Chan(c, c->rank, peer) : Chan(c, peer, c->rank);
  char* ring = send ? ChanData(c, c->rank, peer) : ChanData(c, peer, c->rank);
  const uint64_t w = ch.written.load();
  const uint64_t r = ch.read.load();
  if (t->phase == 1) {
    if (send) {
      if (kChanBytes - (w - r) < sizeof(MsgHeader)) return blocked_on_peer();
      const MsgHeader h{bytes, t->dtype, kMsgMagic};
      RingWrite(ring, w, reinterpret_cast<const char*>(&h), sizeof(h));
      ch.written.store(w + sizeof(h));
    } else {
      if (w - r < sizeof(MsgHeader)) return blocked_on_peer();
      MsgHeader h;
      RingRead(ring, r, reinterpret_cast<char*>(&h), sizeof(h));
      if (h.magic != kMsgMagic || h.bytes != bytes) {
        Print(
            "mismatch on communicator %s: rank %d sent %llu bytes to rank "
            "%d, whose ncclRecv expects %zu (count %zu, %s). NCCL hangs "
            "or corrupts here; dkgpusim hangs until the communicator is "
            "aborted",
            c->tag.c_str(), peer, static_cast<unsigned long long>(h.bytes),
            c->rank, bytes, t->count, TypeName(t->dtype));
        t->phase = 9;
        return kMoved;
      }
      ch.read.store(r + sizeof(h));
    }
    Wake(c);
    t->phase = 2;
    if (bytes == 0) {
      Finish(t, ncclSuccess);
      return kDone;
    }
    return kMoved;
  }
  if (t->phase == 9) return blocked_on_peer();
  const size_t left = bytes - t->moved;
  const size_t ready = send ? kChanBytes - (w - r) : w - r;
  if (ready == 0) return blocked_on_peer();
  const size_t n = std::min(left, ready);
  if (send) {
    RingWrite(ring, w, Translate(t->send + t->moved, n, "ncclSend"), n);
    ch.written.store(w + n);
  } else {
    RingRead(ring, r, Translate(t->recv + t->moved, n, "ncclRecv"), n);
    ch.read.store(r + n);
  }
  t->moved += n;
  Wake(c);
  if (t->moved == bytes) {
    Finish(t, ncclSuccess);
    return kDone;
  }
  return kMoved;
}

Progress Step(Task* t) {
  Comm* c = t->c;
  if (c->aborted.load()) {
    Finish(t, ncclSystemError);
    return kDone;
  }
  const int a = c->async.load();
  if (a != ncclSuccess && a != ncclInProgress) {
    Finish(t, static_cast<ncclResult_t>(a));
    return kDone;
  }
  return (t->kind == kSend || t->kind == kRecv) ? SendRecv(t) : Collective(t);
}

// The body of one stream work item: the tasks of one launch (a call, or a
// group) on that stream, progressed together until all are done, as one
// NCCL kernel would.
void RunTasks(const std::vector<Task*>& tasks) {
  int64_t next_check = NowNs() + kCheckNs;
  for (;;) {
    Comm* wait_on = nullptr;
    uint32_t seen = 0;
    for (Task* t : tasks) {
      if (!t->done) {
        wait_on = t->c;
        seen = t->c->hdr->gen.load();
        break;
      }
    }
    if (wait_on == nullptr) break;
    bool moved = false, left = false;
    for (Task* t : tasks) {
      if (t->done) continue;
      const Progress p = Step(t);
      moved |= p != kBlocked;
      left |= !t->done;
    }
    if (!left) break;
    if (moved) continue;
    if (NowNs() >= next_check) {
      for (Task* t : tasks) {
        if (t->done) continue;
        for (int q : t->waiting) {
          if (const uint32_t why = PeerProblem(t->c, q)) {
            PeerFailed(t->c, q, why, KindName(t->kind));
            break;
          }
        }
      }
      next_check = NowNs() + kCheckNs;
      continue;
    }
    FutexWait(&wait_on->hdr->gen, seen, 10);
  }
  for (Task* t : tasks) {
    Comm* c = t->c;
    delete t;
    Release(c);
  }
}

// Numbers one launch per communicator and queues a work item per stream.
void Launch(const std::vector<std::pair<Task*, Stream*>>& tasks) {
  std::map<Comm*, int> per_comm;
  for (const auto& ts : tasks) ++per_comm[ts.first->c];
  std::map<Comm*, uint64_t> launch;
  for (const auto& pc : per_comm) {
    Comm* c = pc.first;
    std::lock_guard<std::mutex> g(c->mu);
    const uint64_t l = c->next_launch++;
    c->launch_left[l] = pc.second;
    launch[c] = l;
  }
  std::map<Stream*, std::vector<Task*>> per_stream;
  std::vector<Stream*> order;
  for (const auto& ts : tasks) {
    ts.first->launch = launch[ts.first->c];
    if (!per_stream.count(ts.second)) order.push_back(ts.second);
    per_stream[ts.second].push_back(ts.first);
  }
  for (Stream* s : order) {
    std::vector<Task*> mine = per_stream[s];
    Enqueue(
        s, [mine] { RunTasks(mine); }, {}, true);
  }
}

bool IsReduction(Kind k) {
  return k == kAllReduce || k == kReduce || k == kReduceScatter;
}

ncclResult_t CheckBuffer(Comm* c, const char* fn, const char* which,
                         const void* p, size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  std::string why;
  if (p == nullptr) why = "NULL";
  if (p != nullptr && CheckDeviceRange(p, bytes, c->device, &why)) {
    return ncclSuccess;
  }
  return Fail(ncclInvalidArgument, "%s on communicator %s: %s (%zu bytes): %s",
              fn, c->tag.c_str(), which, bytes, why.c_str());
}

// The communicator behind comm; null, the failure reported, if none.
Comm* Known(ncclComm_t comm, const char* fn) {
  Comm* c = Lookup(comm);
  if (c == nullptr) {
    Fail(ncclInvalidArgument, "%s: %p is not a communicator", fn,
         static_cast<void*>(comm));
  }
  return c;
}

ncclResult_t Op(Kind kind, const void* sendbuff, void* recvbuff, size_t count,
                ncclDataType_t dtype, ncclRedOp_t op, int root, ncclComm_t comm,
                cudaStream_t stream) {
  const char* fn = KindName(kind);
  Comm* c = Known(comm, fn);
  if (c == nullptr) return ncclInvalidArgument;
  CommRef ref(c);
  if (!ref.ok()) return CheckUsable(c, fn);
  Owner owner(c, fn);
  if (ncclResult_t r = CheckUsable(c, fn); r != ncclSuccess) return r;
  const size_t es = TypeSize(dtype);
  if (es == 0) {
    return Fail(ncclInvalidArgument,
                "%s: datatype %d is not an "
                "ncclDataType_t",
                fn, static_cast<int>(dtype));
  }
  const int n = c->nranks, me = c->rank;
  if ((kind == kBroadcast || kind == kReduce || kind == kSend ||
       kind == kRecv) &&
      (root < 0 || root >= n)) {
    return Fail(ncclInvalidArgument, "%s: %s %d out of range (%d ranks)", fn,
                kind == kSend || kind == kRecv ? "peer" : "root", root, n);
  }
  bool premul = false;
  PreMul pm;
  if (IsReduction(kind)) {
    if (op >= kPremulFirst) {
      std::lock_guard<std::mutex> g(c->mu);
      auto it = c->premul.find(op);
      if (it == c->premul.end()) {
        return Fail(ncclInvalidArgument,
                    "%s: reduction %d is neither "
                    "built in nor a live ncclRedOpCreatePreMulSum of this "
                    "communicator",
                    fn, static_cast<int>(op));
      }
      pm = it->second;
      premul = true;
      if (pm.dtype != dtype) {
        return Fail(ncclInvalidArgument,
                    "%s: a PreMulSum made for %s used "
                    "with %s",
                    fn, TypeName(pm.dtype), TypeName(dtype));
      }
    } else if (!IsBuiltin(op)) {
      return Fail(ncclInvalidArgument, "%s: %d is not an ncclRedOp_t", fn,
                  static_cast<int>(op));
    }
  }
  Stream* s = nullptr;
  if (StreamForDevice(stream, c->device, &s) != cudaSuccess) {
    return Fail(ncclInvalidArgument, "%s: %p is not a live stream", fn,
                static_cast<void*>(stream));
  }
  if (s->device != c->device) {
    return Fail(ncclUnhandledCudaError,
                "%s on communicator %s (device %d) given a stream of device "
                "%d (cudaErrorInvalidResourceHandle)",
                fn, c->tag.c_str(), c->device, s->device);
  }
  const size_t bytes = count * es;
  ncclResult_t r = ncclSuccess;
  auto check = [&](const char* which, const void* p, size_t b) {
    if (r == ncclSuccess) r = CheckBuffer(c, fn, which, p, b);
  };
  switch (kind) {
    case kAllReduce:
      check("sendbuff", sendbuff, bytes);
      check("recvbuff", recvbuff, bytes);
      break;
    case kBroadcast:
      if (me == root) check("sendbuff", sendbuff, bytes);
      check("recvbuff", recvbuff, bytes);
      break;
    case kReduce:
      check("sendbuff", sendbuff, bytes);
      if (me == root) check("recvbuff", recvbuff, bytes);
      break;
    case kAllGather:
      check("sendbuff", sendbuff, bytes);
      check("recvbuff", recvbuff, bytes * n);
      break;
    case kReduceScatter:
      check("sendbuff", sendbuff, bytes * n);
      check("recvbuff", recvbuff, bytes);
      break;
    case kSend:
      check("sendbuff", sendbuff, bytes);
      break;
    case kRecv:
      check("recvbuff", recvbuff, bytes);
      break;
  }
  if (r != ncclSuccess) return r;
  if (premul && pm.on_device) {
    r = CheckBuffer(c, fn, "the PreMulSum scalar", pm.device, es);
    if (r != ncclSuccess) return r;
  }

  Task* t = new Task;
  t->c = c;
  t->kind = kind;
  t->send = static_cast<const char*>(sendbuff);
  t->recv = static_cast<char*>(recvbuff);
  t->count = count;
  t->dtype = dtype;
  t->op = op;
  t->root = root;
  t->premul = premul;
  if (premul) {
    t->scalar = pm.host;
    t->scalar_dev = pm.on_device ? pm.device : nullptr;
  }
  // A PreMulSum sums (its factor applied first).
  t->red = IsBuiltin(op) ? kBuiltinOps[op].red : RedKind::kSum;
  {
    std::lock_guard<std::mutex> g(c->mu);
    const uint64_t nth = ++c->op_calls;
    if (me == Cfg().die_rank && nth == static_cast<uint64_t>(Cfg().die_at)) {
      Print(
          "rank %d of communicator %s exits at its NCCL operation #%llu "
          "(%s), as DKSIM_NCCL_DIE_RANK/DKSIM_NCCL_DIE_AT ask",
          me, c->tag.c_str(), static_cast<unsigned long long>(nth), fn);
      _exit(1);
    }
    if (me == Cfg().hang_rank && nth == static_cast<uint64_t>(Cfg().hang_at)) {
      Print(
          "rank %d of communicator %s hangs at its NCCL operation #%llu "
          "(%s) until aborted, as DKSIM_NCCL_HANG_RANK/DKSIM_NCCL_HANG_AT "
          "ask",
          me, c->tag.c_str(), static_cast<unsigned long long>(nth), fn);
      t->hang = true;
    }
    if (kind == kSend) {
      t->seq = c->next_send[root]++;
    } else if (kind == kRecv) {
      t->seq = c->next_recv[root]++;
    } else {
      t->seq = c->next_coll++;
    }
  }
  c->pending.fetch_add(1);
  c->refs.fetch_add(1);  // the task's
  if (t_group.depth > 0) {
    t_group.tasks.push_back({t, s});
    return ncclSuccess;
  }
  Launch({{t, s}});
  return MaybeInProgress(c);
}

}  // namespace
}  // namespace dksim

using namespace dksim;  // NOLINT: the C API below is one flat list

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL "
             "developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t /*comm*/) {
  return t_last_message.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return Fail(ncclInvalidArgument, "ncclGetUniqueId: NULL");
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, kIdMagic, sizeof(kIdMagic));
  // Unique across processes whatever DKSIM_SEED says.
  if (getrandom(id->internal + 8, 16, 0) != 16) {
    return Fail(ncclSystemError, "ncclGetUniqueId: getrandom failed");
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                              int rank) {
  return InitRank(comm, nranks, commId, rank, nullptr, -1, true,
                  "ncclCommInitRank");
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                    ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  return InitRank(comm, nranks, commId, rank, config, -1, true,
                  "ncclCommInitRankConfig");
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t* newcomm, ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  Comm* c = Lookup(comm);
  if (c == nullptr || newcomm == nullptr) {
    return Fail(ncclInvalidArgument, "%s: %s", fn,
                c == nullptr ? "not a communicator" : "newcomm is NULL");
  }
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return Fail(ncclInvalidArgument, "%s: color %d", fn, color);
  }
  CommRef ref(c);
  if (!ref.ok()) return CheckUsable(c, fn);
  ncclUniqueId id;
  int members = 0, new_rank = 0;
  {
    Owner owner(c, fn);
    if (ncclResult_t r = CheckUsable(c, fn); r != ncclSuccess) return r;
    const uint64_t k = ++c->splits;
    RankRec& me = Rec(c, c->rank);
    // Entries of the previous split must have been read by everyone.
    ncclResult_t r = WaitAll(
        c, [&](int q) { return Rec(c, q).split_read.load() >= k - 1; }, fn);
    if (r != ncclSuccess) return r;
    me.split_color = color;
    me.split_key = key;
    me.split_posted.store(k);
    Wake(c);
    r = WaitAll(
        c, [&](int q) { return Rec(c, q).split_posted.load() >= k; }, fn);
    if (r != ncclSuccess) return r;
    std::vector<std::pair<int, int>> mine;  // (key, parent rank)
    for (int q = 0; q < c->nranks; ++q) {
      if (Rec(c, q).split_color == color) {
        mine.push_back({Rec(c, q).split_key, q});
      }
    }
    me.split_read.store(k);
    Wake(c);
    if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    std::sort(mine.begin(), mine.end());
    members = static_cast<int>(mine.size());
    for (int i = 0; i < members; ++i) {
      if (mine[i].second == c->rank) new_rank = i;
    }
    // Every member derives the same id: the parent's, the split's number
    // and the color, hashed.
    std::memset(id.internal, 0, sizeof(id.internal));
    std::memcpy(id.internal, kIdMagic, sizeof(kIdMagic));
    for (int half = 0; half < 2; ++half) {
      uint64_t h = 1469598103934665603ULL ^ (half ? 0x9e3779b97f4a7c15ULL : 0);
      auto mix = [&h](uint64_t v) {
        for (int i = 0; i < 8; ++i) {
          h ^= (v >> (8 * i)) & 0xff;
          h *= 1099511628211ULL;
        }
      };
      for (int i = 0; i < 16; ++i)
        mix(static_cast<uint8_t>(c->id.internal[8 + i]));
      mix(k);
      mix(static_cast<uint64_t>(static_cast<uint32_t>(color)));
      std::memcpy(id.internal + 8 + 8 * half, &h, 8);
    }
  }
  return InitRank(newcomm, members, id, new_rank, config, c->device,
                  c->blocking, fn);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  Comm* c = Lookup(comm);
  if (c == nullptr)
    return Fail(ncclInvalidArgument,
                "ncclCommFinalize: "
                "not a communicator");
  CommRef ref(c);
  if (!ref.ok()) return CheckUsable(c, "ncclCommFinalize");
  Owner owner(c, "ncclCommFinalize");
  std::unique_lock<std::mutex> lk(DoneMutex());
  DoneCv().wait(lk, [c] { return c->pending.load() == 0; });
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  Comm* c = Known(comm, "ncclCommDestroy");
  if (c == nullptr) return ncclInvalidArgument;
  CommRef ref(c);
  if (!ref.ok() || c->aborted.load() || c->destroyed.load()) {
    return Fail(ncclInvalidUsage,
                "ncclCommDestroy on communicator %s after ncclComm%s",
                c->tag.c_str(), c->aborted.load() ? "Abort" : "Destroy");
  }
  if (t_group.depth > 0) {
    // It would wait for the group's operations, which wait for
    // ncclGroupEnd.
    return Fail(ncclInvalidUsage,
                "ncclCommDestroy on communicator %s inside ncclGroupStart / "
                "ncclGroupEnd",
                c->tag.c_str());
  }
  {
    Owner owner(c, "ncclCommDestroy");
    // As NCCL's: the communicator's queued operations finish first.
    {
      std::unique_lock<std::mutex> lk(DoneMutex());
      DoneCv().wait(lk, [c] { return c->pending.load() == 0; });
    }
    if (c->attached.load() && Rec(c, c->rank).state.load() == kLive) {
      Rec(c, c->rank).state.store(kLeft);
      Wake(c);
    }
    UnlinkUnfinished(c);
    c->destroyed.store(true);
  }
  ReleaseHandle(c);
  return ncclSuccess;
}

// Safe from any thread at any time, also while another is inside a call on
// the communicator: pending and later operations fail, peers learn of it.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  Comm* c = Known(comm, "ncclCommAbort");
  if (c == nullptr) return ncclInvalidArgument;
  CommRef ref(c);
  if (!ref.ok()) return ncclSuccess;  // already gone
  if (c->aborted.exchange(true)) return ncclSuccess;
  if (c->attached.load()) {
    Rec(c, c->rank).state.store(kAborted);
    // Here too, not only when the initialization's thread sees the abort:
    // the process may exit first.
    UnlinkUnfinished(c);
  }
  Wake(c);
  DoneCv().notify_all();
  ReleaseHandle(c);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  Comm* c = Lookup(comm);
  if (c == nullptr || asyncError == nullptr) {
    return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: %s",
                c == nullptr ? "not a communicator" : "asyncError is NULL");
  }
  if (c->aborted.load()) {
    *asyncError = ncclSystemError;
    return ncclSuccess;
  }
  int a = c->async.load();
  if (a == ncclInProgress && c->ready.load() &&
      NowNs() >= c->inprogress_until.load()) {
    c->async.compare_exchange_strong(a, ncclSuccess);
    a = c->async.load();
  }
  *asyncError = static_cast<ncclResult_t>(a);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  Comm* c = Lookup(comm);
  if (c == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  Comm* c = Lookup(comm);
  if (c == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = c->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  Comm* c = Lookup(comm);
  if (c == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                      ncclDataType_t datatype,
                                      ncclScalarResidence_t residence,
                                      ncclComm_t comm) {
  const char* fn = "ncclRedOpCreatePreMulSum";
  Comm* c = Lookup(comm);
  if (c == nullptr || op == nullptr || scalar == nullptr) {
    return Fail(ncclInvalidArgument, "%s: NULL argument or no communicator",
                fn);
  }
  CommRef ref(c);
  if (!ref.ok()) return CheckUsable(c, fn);
  Owner owner(c, fn);
  const size_t es = TypeSize(datatype);
  if (es == 0) return Fail(ncclInvalidArgument, "%s: bad datatype", fn);
  PreMul pm;
  pm.dtype = datatype;
  if (residence == ncclScalarHostImmediate) {
    pm.host.assign(static_cast<const char*>(scalar),
                   static_cast<const char*>(scalar) + es);
  } else if (residence == ncclScalarDevice) {
    std::string why;
    if (!CheckDeviceRange(scalar, es, c->device, &why)) {
      return Fail(ncclInvalidArgument, "%s: the scalar: %s", fn, why.c_str());
    }
    pm.on_device = true;
    pm.device = scalar;
  } else {
    return Fail(ncclInvalidArgument, "%s: bad residence %d", fn,
                static_cast<int>(residence));
  }
  std::lock_guard<std::mutex> g(c->mu);
  const int id = c->next_premul++;
  c->premul[id] = pm;
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  Comm* c = Lookup(comm);
  if (c == nullptr) return ncclInvalidArgument;
  CommRef ref(c);
  Owner owner(c, "ncclRedOpDestroy");
  std::lock_guard<std::mutex> g(c->mu);
  if (c->premul.erase(op) == 0) {
    return Fail(ncclInvalidArgument,
                "ncclRedOpDestroy: %d is not a live "
                "PreMulSum of communicator %s",
                static_cast<int>(op), c->tag.c_str());
  }
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return Op(kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm,
            stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return Op(kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root,
            comm, stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype,
                       int root, ncclComm_t comm, cudaStream_t stream) {
  return Op(kBroadcast, buff, buff, count, datatype, ncclSum, root, comm,
            stream);
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return Op(kReduce, sendbuff, recvbuff, count, datatype, op, root, comm,
            stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return Op(kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0,
            comm, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return Op(kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0,
            comm, stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return Op(kSend, sendbuff, nullptr, count, datatype, ncclSum, peer, comm,
            stream);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  return Op(kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer, comm,
            stream);
}

ncclResult_t ncclGroupStart() {
  ++t_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group.depth == 0) {
    return Fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  }
  if (--t_group.depth > 0) return ncclSuccess;
  GroupState g;
  std::swap(g, t_group);
  ncclResult_t result = ncclSuccess;
  // Initializations of several ranks in one thread: attach all, then wait.
  std::vector<Comm*> blocking_inits;
  for (Comm* c : g.inits) {
    if (!c->blocking) {
      InitInBackground(c);
      result = ncclInProgress;
      continue;
    }
    ncclResult_t r = Join(c);
    if (r == ncclSuccess) {
      blocking_inits.push_back(c);
    } else {
      InitDone(c, r);
      result = r;
    }
  }
  for (Comm* c : blocking_inits) {
    const ncclResult_t r = FinishInit(c);
    InitDone(c, r);
    if (r != ncclSuccess && result == ncclSuccess) result = r;
  }
  // The communicators first: once launched, a stream's worker may finish
  // and delete the tasks at any moment.
  std::set<Comm*> in_group;
  for (const auto& ts : g.tasks) in_group.insert(ts.first->c);
  if (!g.tasks.empty()) Launch(g.tasks);
  for (Comm* c : g.owned) c->owner.store(0);
  if (result == ncclSuccess) {
    for (Comm* c : in_group) {
      if (MaybeInProgress(c) == ncclInProgress) result = ncclInProgress;
    }
  }
  return result;
}

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  return cudaMalloc(ptr, size) == cudaSuccess ? ncclSuccess
                                              : ncclUnhandledCudaError;
}

ncclResult_t ncclMemFree(void* ptr) {
  return cudaFree(ptr) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

}  // extern "C"
