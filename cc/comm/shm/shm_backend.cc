#include "cc/comm/shm/shm_backend.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/comm/shm/futex.h"
#include "cc/comm/shm/single_copy.h"
#include "cc/core/fast_clock.h"
#include "cc/core/status.h"

namespace distkit {

// What every rank of the group shares, first in the segment: the futex word
// an arriving rank bumps and wakes when some rank sleeps in a wait, and how
// many ranks sleep (arrivals that see none make no system call).
struct alignas(128) ShmBackend::GroupHeader {
  std::atomic<uint32_t> wake_word;
  std::atomic<uint32_t> sleepers;
  // 1 + the rank that failed inside an operation and will not arrive (a
  // single-copy read refused): every wait of every rank ends with an error.
  std::atomic<int32_t> failed_by;
  // Written by rank 0 before any other rank reads them (they read after
  // every rank has said it attached), so that every rank picks the same
  // algorithms: DISTKIT_SHM_SINGLE_COPY=1 in rank 0's environment, and
  // whether the group has more ranks than the host has CPUs online.
  uint32_t single_copy_everywhere;
  uint32_t oversubscribed;
};

struct alignas(128) ShmBackend::Header {
  std::atomic<uint64_t> step;  // the last step this rank published
  LivenessRecord liveness;
  // Single copy: the address (in this rank's process) of the buffer of the
  // current operation, published before the step after which peers read it
  // and read by them before they arrive at the operation's last step.
  std::atomic<uint64_t> buffer;
  // The probe: a peer reads `probe_token` at `probe_addr` in this rank's
  // process and compares it with what the segment says.
  std::atomic<uint64_t> probe_token;
  std::atomic<uint64_t> probe_addr;
  // By turn (the two turns of the slots): this rank's signature for the
  // exchange made in that turn, a copy of `step` as of its last step in that
  // turn, and its packed small slot. A peer waiting for a step polls the
  // line it will read next: the signature, the step and a payload of up to
  // 16 bytes share one cache line (and the next line comes with it,
  // 128-byte aligned pairs), so a small operation costs each peer one cache
  // miss per rank it hears from. A turn is rewritten only after every rank
  // has published a later step, i.e. finished reading it (as every slot).
  struct alignas(128) Turn {
    OpSignature sig;
    std::atomic<uint64_t> step;
    alignas(8) char small[kSmallSlotBytes];
  };
  Turn turns[2];
};

namespace {

size_t SegmentBytes(int size, size_t group_header, size_t header) {
  return group_header + size * header +
         size * 2 * ShmBackend::SlotBytesFor(size);
}

// A wait first spins (a peer on another core answers within a microsecond),
// then yields (ranks may share cores) for kYieldPhase, then sleeps on the
// group's futex word in slices of kSleepSlice, between which it checks the
// deadline, an abort and the liveness of the ranks that have not arrived.
// The yield phase outlasts the waits of a large operation's steps (a 16 MiB
// single-copy broadcast's readers copy for ~2.5 ms): waking a sleeping rank
// costs the waker a futex call and the sleeper its virtual CPU's wake-up,
// which took that broadcast from 2.1-2.4 ms to 3.3-8 ms with 2 ms here, and a
// 4 MiB one from 0.5 to 1.35 ms with 200 us. A rank waiting 2 s yields for
// 1% of it.
constexpr int kPureSpins = 256;
constexpr absl::Duration kYieldPhase = absl::Milliseconds(20);
constexpr absl::Duration kSleepSlice = absl::Milliseconds(10);
// Liveness looks (which read /proc) every kLivenessInterval. Both grow with
// the group past 32 ranks (to at most 100 ms and 500 ms): hundreds of
// waiting ranks that each wake and look every few milliseconds would take
// the CPU from the ranks they wait for. An abort wakes sleepers at once.
constexpr absl::Duration kLivenessInterval = absl::Milliseconds(20);

absl::Duration ScaledBySize(absl::Duration base, int size, absl::Duration cap) {
  return std::min(cap, base * std::max(1, (size + 31) / 32));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> ShmBackend::MaybeWrap(
    std::shared_ptr<Store> store, int rank, int size,
    const WrappedFactory& make_gloo, absl::Duration timeout) {
  const char* env = std::getenv("DISTKIT_SHM");
  if (size < 2 || size > kMaxRanks ||
      (env != nullptr && std::string(env) == "0")) {
    return make_gloo(false);
  }
  const size_t bytes = SegmentBytes(size, sizeof(GroupHeader), sizeof(Header));
  std::string name;
  int fd = -1;
  if (rank == 0) {
    std::random_device rd;
    name = absl::StrCat("/distkit-", getpid(), "-", rd(), rd());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    // Reserve the pages now: a sparse segment on a small /dev/shm (64 MiB in
    // many containers) would fail later with SIGBUS instead of an error.
    if (fd < 0 || ftruncate(fd, bytes) != 0 ||
        posix_fallocate(fd, 0, bytes) != 0) {
      if (fd >= 0) {
        close(fd);
        shm_unlink(name.c_str());
      }
      // No room in shared memory: every rank stays on TCP.
      DK_RETURN_IF_ERROR(store->Set("name", ""));
      return make_gloo(false);
    }
    DK_RETURN_IF_ERROR(store->Set("name", name));
  } else {
    DK_ASSIGN_OR_RETURN(name, store->Get("name", timeout));
    if (name.empty()) return make_gloo(false);
    fd = shm_open(name.c_str(), O_RDWR, 0600);
  }
  void* base =
      fd < 0 ? MAP_FAILED
             : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  if (rank == 0 && base != MAP_FAILED) {
    auto* g = static_cast<GroupHeader*>(base);
    const char* single = std::getenv("DISTKIT_SHM_SINGLE_COPY");
    g->single_copy_everywhere = single != nullptr && std::string(single) == "1";
    g->oversubscribed = size > sysconf(_SC_NPROCESSORS_ONLN);
  }
  // Every rank says whether it mapped the segment; all take the shared
  // memory path or none does (the two paths must never mix in one group).
  DK_RETURN_IF_ERROR(store->Set(absl::StrCat("attached/", rank),
                                base == MAP_FAILED ? "0" : "1"));
  std::vector<std::string> attached_keys;
  for (int r = 0; r < size; ++r)
    attached_keys.push_back(absl::StrCat("attached/", r));
  DK_ASSIGN_OR_RETURN(std::vector<std::string> attached,
                      store->MultiGetWithTimeout(attached_keys, timeout));
  // Everyone has mapped it (or given up): the name goes, so nothing is left
  // in /dev/shm even if a rank crashes; the memory lives with the mappings.
  if (rank == 0) shm_unlink(name.c_str());
  bool everyone = true;
  for (const std::string& a : attached) everyone &= a == "1";
  if (!everyone) {
    if (base != MAP_FAILED) munmap(base, bytes);
    return make_gloo(false);
  }
  absl::StatusOr<std::unique_ptr<Backend>> gloo = make_gloo(true);
  if (!gloo.ok()) {
    munmap(base, bytes);
    return gloo.status();
  }
  std::unique_ptr<ShmBackend> b(
      new ShmBackend(rank, size, *std::move(gloo), base, bytes));
  Header* mine = b->header(rank);
  StartHeartbeat(&mine->liveness);
  std::random_device rd;
  mine->probe_token = (uint64_t{rd()} << 32 | rd()) | 1;
  mine->probe_addr = reinterpret_cast<uintptr_t>(&mine->probe_token);
  return std::unique_ptr<Backend>(std::move(b));
}

ShmBackend::ShmBackend(int rank, int size, std::unique_ptr<Backend> gloo,
                       void* base, size_t bytes)
    : rank_(rank),
      size_(size),
      gloo_(std::move(gloo)),
      base_(base),
      bytes_(bytes),
      slot_bytes_(SlotBytesFor(size)),
      single_copy_everywhere_(group_header()->single_copy_everywhere != 0),
      oversubscribed_(group_header()->oversubscribed != 0),
      watches_(size) {
  // Fault injection for tests: a pause between seeing that a peer has not
  // published a step and asking whether it is alive, which opens the window
  // in which a peer can publish and exit.
  if (const char* pause = std::getenv("DISTKIT_SHM_TEST_LIVENESS_PAUSE_MS")) {
    liveness_pause_ = absl::Milliseconds(std::atoi(pause));
  }
}

ShmBackend::~ShmBackend() {
  StopHeartbeat(&header(rank_)->liveness);
  munmap(base_, bytes_);
}

size_t ShmBackend::SlotBytesFor(int size) {
  size_t bytes = kMaxSlotBytes;
  while (bytes > kMinSlotBytes && bytes * 2 * size > kSlotBudgetBytes) {
    bytes /= 2;
  }
  return bytes;
}

ShmBackend::GroupHeader* ShmBackend::group_header() const {
  return static_cast<GroupHeader*>(base_);
}

ShmBackend::Header* ShmBackend::header(int r) const {
  return reinterpret_cast<Header*>(static_cast<char*>(base_) +
                                   sizeof(GroupHeader) + r * sizeof(Header));
}

char* ShmBackend::slot(int r, size_t bytes, int turn) const {
  if (bytes <= kSmallSlotBytes) return header(r)->turns[turn].small;
  char* full =
      static_cast<char*>(base_) + sizeof(GroupHeader) + size_ * sizeof(Header);
  return full + (2 * r + turn) * slot_bytes_;
}

void ShmBackend::Abort() {
  aborted_ = true;
  // This rank's waits end now (other ranks' sleepers wake spuriously and
  // sleep again).
  FutexWakeAll(&group_header()->wake_word);
  gloo_->Abort();
}

bool ShmBackend::Published(int r, uint64_t step, bool thorough) const {
  const Header* h = header(r);
  if (h->turns[turn_].step.load(std::memory_order_acquire) >= step) {
    return true;
  }
  // The authoritative count: a peer that stepped in the other turn (ranks
  // whose calls disagreed) is still seen, a few spins late.
  return thorough && h->step.load(std::memory_order_acquire) >= step;
}

bool ShmBackend::AllPublished(uint64_t step, int* first_missing,
                              bool thorough) const {
  // Steps only grow, so the ranks already seen need no second look.
  for (int& r = *first_missing; r < size_; ++r) {
    if (r != rank_ && !Published(r, step, thorough)) return false;
  }
  return true;
}

absl::Status ShmBackend::Step(const OpContext& ctx) {
  const uint64_t step = ++step_;
  Header* mine = header(rank_);
  // The copy in this turn's line is what peers poll (release: this rank's
  // slot writes come with it); the header's own count is what the liveness
  // check and the diagnosis of who is late read.
  mine->step.store(step, std::memory_order_release);
  mine->turns[turn_].step.store(step, std::memory_order_release);
  GroupHeader* g = group_header();
  // The clock is first read when the pure spins are over: a step that
  // completes while spinning (the common case for small operations on free
  // cores) reads it not at all. The deadline counts from that first read,
  // under a microsecond late.
  int first_missing = 0;
  bool timed = false;
  absl::Time deadline, next_liveness, sleep_from;
  absl::Duration slice, liveness_interval;
  for (uint64_t spins = 0; !AllPublished(step, &first_missing, timed);
       ++spins) {
    if (spins < kPureSpins) continue;
    const absl::Time now = FastNow();
    if (!timed) {
      timed = true;
      slice = ScaledBySize(kSleepSlice, size_, absl::Milliseconds(100));
      liveness_interval =
          ScaledBySize(kLivenessInterval, size_, absl::Milliseconds(500));
      deadline = now + ctx.timeout;
      next_liveness = now + liveness_interval;
      sleep_from = now + kYieldPhase;
    }
    if (now < sleep_from) {
      sched_yield();
      if ((spins & 63) != 0) continue;
    } else {
      // One word for the whole group: a sleeper wakes at each arrival and
      // looks again (sleeping starts only after kYieldPhase of waiting).
      g->sleepers.fetch_add(1);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      const uint32_t seen = g->wake_word.load();
      int missing = first_missing;
      if (!AllPublished(step, &missing, /*thorough=*/true) && !aborted_) {
        FutexWait(&g->wake_word, seen, slice);
      }
      g->sleepers.fetch_sub(1);
    }
    if (aborted_) {
      return absl::CancelledError(
          absl::StrCat(ctx.Describe(), ": the group was aborted"));
    }
    if (const int failed = g->failed_by.load(std::memory_order_relaxed)) {
      return absl::UnavailableError(
          absl::StrCat(ctx.Describe(), " (rank ", rank_, "): rank ", failed - 1,
                       " failed inside the operation and left the group"));
    }
    if (now > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          ctx.Describe(), " (rank ", rank_, "): timed out after ",
          absl::FormatDuration(ctx.timeout), " waiting for peers"));
    }
    if (now > next_liveness) {
      next_liveness = now + liveness_interval;
      if (liveness_pause_ > absl::ZeroDuration()) {
        absl::SleepFor(liveness_pause_);
      }
      // A liveness look reads /proc: one look per interval at the first rank
      // that has not arrived (the one this rank would wait for in rank order)
      // and one at the next missing rank in turn, not one at every missing
      // rank, which at hundreds of ranks costs more than the wait itself.
      int late = -1;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ &&
            header(r)->step.load(std::memory_order_acquire) < step) {
          late = r;
          break;
        }
      }
      int rotating = -1;
      for (int i = 1; late >= 0 && i <= size_; ++i) {
        const int r = (liveness_cursor_ + i) % size_;
        if (r != rank_ && r != late &&
            header(r)->step.load(std::memory_order_acquire) < step) {
          rotating = r;
          break;
        }
      }
      if (rotating >= 0) liveness_cursor_ = rotating;
      for (int r : {late, rotating}) {
        if (r < 0) continue;
        Header* h = header(r);
        std::optional<std::string> gone = watches_[r].Gone(h->liveness);
        // A peer that has left is a failure only if this step still needs
        // it: one that published the step and then exited did its part.
        if (gone && h->step.load(std::memory_order_acquire) < step) {
          return absl::UnavailableError(absl::StrCat(
              ctx.Describe(), " (rank ", rank_, "): rank ", r, " ", *gone,
              " before it reached this operation's step; a peer failed"));
        }
      }
    }
  }
  // Every rank has published this step: wake whoever sleeps on it. Done
  // after the wait, not between publishing and polling, so the fence costs
  // nothing on the way to the peers' lines (this rank's own line is long
  // written by now). Against a sleeper's count-then-look, seq_cst on both
  // sides: either it saw the last arrival's step (and does not sleep) or
  // the last arrival, whose wait ends at once, sees it counted here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (g->sleepers.load(std::memory_order_relaxed) != 0) {
    g->wake_word.fetch_add(1);
    FutexWakeAll(&g->wake_word);
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::ExchangeSignatures(const OpContext& ctx,
                                            const OpSignature& mine,
                                            InlinePayload payload,
                                            absl::Span<OpSignature> all) {
  // The payload rides along in this turn's slot (CarriesPayload), so the
  // operation takes one step, not two. Every rank flips its turn here
  // whatever it carried: ranks whose calls disagree (so their payload sizes
  // may differ) stay in step. Writing a slot before the signatures agree is
  // safe: its last readers are two steps behind, and nobody reads it unless
  // they agree.
  const OpCode op = static_cast<OpCode>(mine.op);
  const bool carry = CarriesPayload(op, payload.bytes);
  if (carry && payload.data != nullptr) {
    std::memcpy(slot(rank_, payload.bytes), payload.data, payload.bytes);
  }
  // A single-copy operation's buffer is published with the signature: the
  // operation then skips the step that would publish it.
  const void* early = carry ? nullptr : EarlyBuffer(op, payload);
  if (early != nullptr) PublishBuffer(early);
  header(rank_)->turns[turn_].sig = mine;
  inline_bytes_ = 0;
  early_buffer_ = nullptr;
  DK_RETURN_IF_ERROR(Step(ctx));
  bool same = early != nullptr;  // compared only where it matters
  for (int r = 0; r < size_; ++r) {
    all[r] = header(r)->turns[turn_].sig;
    same = same && std::memcmp(&all[r], &mine, sizeof(mine)) == 0;
  }
  inline_turn_ = turn_;
  inline_bytes_ = carry ? payload.bytes : 0;
  // Only where every rank called this same operation (then each published
  // early): taken by that operation alone (PublishForSingleCopy).
  if (same) {
    early_buffer_ = early;
    early_op_ = op;
    early_seq_ = mine.seq;
  }
  turn_ ^= 1;
  return absl::OkStatus();
}

const void* ShmBackend::EarlyBuffer(OpCode op,
                                    const InlinePayload& payload) const {
  if (single_copy_ != SingleCopy::kYes) return nullptr;
  switch (op) {
    case OpCode::kAllReduce:
    case OpCode::kBroadcast:
      return PrefersSingleCopy(op, payload.bytes) ? payload.output : nullptr;
    case OpCode::kAllGather:  // payload: the input; the output is published
      return PrefersSingleCopy(op, payload.bytes * size_) ? payload.output
                                                          : nullptr;
    case OpCode::kReduceScatter:  // the peers read the input
      return PrefersSingleCopy(op, payload.bytes) ? payload.data : nullptr;
    default:
      return nullptr;
  }
}

absl::Status ShmBackend::PublishForSingleCopy(const OpContext& ctx, OpCode op,
                                              const void* buffer) {
  const void* early = std::exchange(early_buffer_, nullptr);
  if (early == nullptr || early_op_ != op || early_seq_ != ctx.seq) {
    PublishBuffer(buffer);
    return Step(ctx);
  }
  if (early != buffer) {
    // The peers copy to or from the published buffer: never a wrong one.
    return FailGroup(absl::InternalError(
        absl::StrCat(ctx.Describe(), " (rank ", rank_,
                     "): the buffer published with the signature is not the "
                     "operation's")));
  }
  return absl::OkStatus();
}

bool ShmBackend::CarriesPayload(OpCode op, size_t bytes) const {
  if (bytes == 0) return false;
  if (bytes <= kSmallSlotBytes) return true;
  // Larger payloads ride along only where the operation would have sent
  // them in one chunk through the same slots anyway.
  switch (op) {
    case OpCode::kAllReduce:
    case OpCode::kReduce:
      return bytes <= kSliceReduceFromBytes;  // the one-step fold wins
    case OpCode::kBroadcast:
      return bytes <= (oversubscribed_ ? slot_bytes_ : kFirstBroadcastChunk) &&
             !PrefersSingleCopy(op, bytes);
    case OpCode::kAllGather:
      return bytes <= slot_bytes_ &&
             !PrefersSingleCopy(op, bytes * static_cast<size_t>(size_));
    default:
      return false;
  }
}

bool ShmBackend::TakeInline(size_t bytes) {
  const bool carried = bytes > 0 && inline_bytes_ == bytes;
  inline_bytes_ = 0;
  return carried;
}

// ---- Collectives ---------------------------------------------------------
//
// Every chunk of every operation writes the slots of turn_, reads them after
// one or two steps, then flips turn_. A slot is written again only two chunks
// later, after every rank has arrived at a step that follows its last read.

namespace {

// Elements [lo, hi) of an n-element chunk that rank r of `size` reduces.
int64_t SliceBegin(int64_t n, int r, int size) { return n * r / size; }

}  // namespace

void ShmBackend::FoldSlots(ReduceFn fn, size_t offset, size_t bytes,
                           size_t slot_bytes, size_t elem, char* out,
                           int turn) const {
  const size_t n = bytes / elem;
  // Rank order, as on every other path: float sums round identically.
  fn(out, slot(0, slot_bytes, turn) + offset,
     slot(1, slot_bytes, turn) + offset, n);
  for (int r = 2; r < size_; ++r) {
    fn(out, out, slot(r, slot_bytes, turn) + offset, n);
  }
}

void ShmBackend::FoldInline(ReduceFn fn, size_t bytes, size_t elem,
                            char* out) const {
  FoldSlots(fn, 0, bytes, bytes, elem, out, inline_turn_);
}

// ---- Single copy ---------------------------------------------------------

bool ShmBackend::PrefersSingleCopy(OpCode op, size_t bytes) const {
  // Measured on these machines (2 cores; world 2 = a core per rank, world 4
  // = oversubscribed), the paths alternated in one run, medians of 3
  // (tools/dkbench/RESULTS.md, issue 15). An all_reduce that writes its
  // results into the peers (AllReduceSingleCopy) wins from just past the
  // one-step fold with a core per rank (20 KiB: 3.9 against 5.3 us by the
  // slots; 1 MiB: 71 against 180 us), and from 1 MiB oversubscribed, where
  // the slots win below (a process_vm_readv pins the peer's pages while
  // that peer may not be running). For the other operations the pipelined
  // slots win or tie at every size oversubscribed; with a core per rank,
  // single copy wins for all_gather, reduce_scatter and broadcast at every
  // size (a broadcast's root and reader each move half: 1.2-2.8x OpenMPI
  // from 256 KiB, where the reader alone moving all of it lost to the slots
  // from 4 MiB), and for gather and scatter, which also win oversubscribed
  // from 256 KiB (16 MiB gather at world size 4: 1.39 against 1.70 ms by
  // the slots; at 64 KiB, 15.3 against 12.7 us).
  if (op == OpCode::kAllReduce && !oversubscribed_) {
    return bytes > kSliceReduceFromBytes;
  }
  if (bytes < kSingleCopyFromBytes) return false;
  if (single_copy_everywhere_ || !oversubscribed_) return true;
  switch (op) {
    case OpCode::kAllReduce:
      return bytes >= kSingleCopyAllReduceFromBytes;
    case OpCode::kGather:  // each rank copies to or from the root alone
    case OpCode::kScatter:
      return bytes >= kSingleCopyRootedFromBytes;
    default:
      return false;
  }
}

absl::StatusOr<bool> ShmBackend::UseSingleCopy(const OpContext& ctx, OpCode op,
                                               size_t bytes) {
  if (!PrefersSingleCopy(op, bytes)) return false;
  if (single_copy_ == SingleCopy::kUnknown) {
    // Once per group, at the first operation large enough (the same one on
    // every rank): each rank reads its right neighbour's token and writes the
    // same value back (a broadcast's root writes into its readers); one
    // refusal anywhere keeps the whole group on the slots.
    bool ok = SingleCopyAllowed();
    if (ok) {
      const int peer = (rank_ + 1) % size_;
      const Header* h = header(peer);
      const int pid = h->liveness.pid.load();
      void* remote = reinterpret_cast<void*>(h->probe_addr.load());
      uint64_t token = 0;
      ok = ReadPeerMemory(pid, remote, &token, sizeof(token)).ok() &&
           token == h->probe_token.load() &&
           WritePeerMemory(pid, remote, &token, sizeof(token)).ok();
    }
    DK_ASSIGN_OR_RETURN(size_t refused, MaxOverRanks(ctx, ok ? 0 : 1));
    single_copy_ = refused == 0 ? SingleCopy::kYes : SingleCopy::kNo;
  }
  return single_copy_ == SingleCopy::kYes;
}

void ShmBackend::PublishBuffer(const void* buffer) {
  // Released by the next step's arrival.
  header(rank_)->buffer.store(reinterpret_cast<uintptr_t>(buffer),
                              std::memory_order_relaxed);
}

absl::Status ShmBackend::CopyWithPeer(const OpContext& ctx, int r,
                                      size_t offset, void* local, size_t bytes,
                                      bool write) {
  if (bytes == 0) return absl::OkStatus();
  const Header* h = header(r);
  char* remote =
      reinterpret_cast<char*>(h->buffer.load(std::memory_order_relaxed)) +
      offset;
  const int pid = h->liveness.pid.load();
  absl::Status copied = write ? WritePeerMemory(pid, remote, local, bytes)
                              : ReadPeerMemory(pid, remote, local, bytes);
  if (!copied.ok()) {
    return absl::UnavailableError(absl::StrCat(
        ctx.Describe(), " (rank ", rank_, "): ", write ? "writing" : "reading",
        " rank ", r, "'s buffer failed (", copied.message(),
        "); a peer failed"));
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::ReadPeer(const OpContext& ctx, int r, size_t offset,
                                  void* local, size_t bytes) {
  return CopyWithPeer(ctx, r, offset, local, bytes, /*write=*/false);
}

absl::Status ShmBackend::WritePeer(const OpContext& ctx, int r, size_t offset,
                                   const void* local, size_t bytes) {
  // Not written through: WritePeerMemory only reads `local`.
  return CopyWithPeer(ctx, r, offset, const_cast<void*>(local), bytes,
                      /*write=*/true);
}

absl::Status ShmBackend::FailGroup(absl::Status why) {
  // This rank will not arrive at the step its peers wait at: they must not
  // wait for it until the deadline, nor finish with its part missing.
  group_header()->failed_by.store(rank_ + 1);
  FutexWakeAll(&group_header()->wake_word);
  return why;
}

char* ShmBackend::CopyScratch(size_t bytes) {
  if (copy_scratch_.size() < bytes) copy_scratch_.resize(bytes);
  return copy_scratch_.data();
}

// out[0, bytes) = the rank-order fold of every rank's buffer at `offset`,
// reading peers piece by piece into scratch (`own` is this rank's part).
absl::Status ShmBackend::FoldPeers(const OpContext& ctx, ReduceFn fn,
                                   size_t offset, size_t bytes, size_t elem,
                                   const char* own, char* out,
                                   bool write_back) {
  const size_t piece = kFoldPieceBytes / elem * elem;
  char* acc = CopyScratch(2 * piece);
  char* theirs = acc + piece;
  for (size_t at = 0; at < bytes; at += piece) {
    const size_t len = std::min(piece, bytes - at);
    const char* running = own + at;
    if (rank_ != 0) {
      DK_RETURN_IF_ERROR(ReadPeer(ctx, 0, offset + at, acc, len));
      running = acc;
    }
    for (int r = 1; r < size_; ++r) {
      const char* next = own + at;
      if (r != rank_) {
        DK_RETURN_IF_ERROR(ReadPeer(ctx, r, offset + at, theirs, len));
        next = theirs;
      }
      // The last fold writes the result; the ones before, the accumulator.
      char* into = r == size_ - 1 ? out + at : acc;
      fn(into, running, next, len / elem);
      running = acc;
    }
    for (int r = 0; write_back && r < size_; ++r) {
      if (r != rank_) {
        DK_RETURN_IF_ERROR(WritePeer(ctx, r, offset + at, out + at, len));
      }
    }
  }
  return absl::OkStatus();
}

// all_reduce by slices of the whole buffer: each rank reads its slice of
// every peer's buffer (one copy each), folds it into its own buffer and
// writes the result into the same slice of every peer's. Only a slice's
// owner touches that slice of any buffer, so nobody waits between the read
// and the write; a last step keeps every buffer in place until all writes
// are done. Writing instead of reading the others' results saves a step,
// and the written piece is still in the writer's cache.
absl::Status ShmBackend::AllReduceSingleCopy(const OpContext& ctx,
                                             TensorRef data, ReduceFn fn) {
  const size_t elem = ElementSize(data.dtype());
  char* mine = static_cast<char*>(data.data());
  DK_RETURN_IF_ERROR(PublishForSingleCopy(ctx, OpCode::kAllReduce, mine));
  const size_t lo = SliceBegin(data.numel(), rank_, size_) * elem;
  const size_t hi = SliceBegin(data.numel(), rank_ + 1, size_) * elem;
  absl::Status folded = FoldPeers(ctx, fn, lo, hi - lo, elem, mine + lo,
                                  mine + lo, /*write_back=*/true);
  if (!folded.ok()) return FailGroup(folded);
  return Step(ctx);
}

absl::Status ShmBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                   ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(data.dtype(), op));
  if (TakeInline(data.nbytes())) {
    FoldInline(fn, data.nbytes(), ElementSize(data.dtype()),
               static_cast<char*>(data.data()));
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(bool single_copy,
                      UseSingleCopy(ctx, OpCode::kAllReduce, data.nbytes()));
  if (single_copy) return AllReduceSingleCopy(ctx, data, fn);
  if (data.nbytes() > kSliceReduceFromBytes) {
    return ReduceBySlices(ctx, data, fn, /*root=*/-1);
  }
  // Small: one step, and every rank folds every slot (the data is a few
  // cache lines; a second step would cost more than the extra reads).
  const size_t elem = ElementSize(data.dtype());
  const size_t bytes = data.nbytes();
  char* mine = static_cast<char*>(data.data());
  std::memcpy(slot(rank_, bytes), mine, bytes);
  DK_RETURN_IF_ERROR(Step(ctx));
  FoldSlots(fn, 0, bytes, bytes, elem, mine);
  turn_ ^= 1;
  return absl::OkStatus();
}

absl::Status ShmBackend::Reduce(const OpContext& ctx, TensorRef data,
                                ReduceOp op, int root) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(data.dtype(), op));
  if (TakeInline(data.nbytes())) {
    if (rank_ == root) {
      FoldInline(fn, data.nbytes(), ElementSize(data.dtype()),
                 static_cast<char*>(data.data()));
    }
    return absl::OkStatus();
  }
  if (data.nbytes() > kSliceReduceFromBytes) {
    return ReduceBySlices(ctx, data, fn, root);
  }
  const size_t elem = ElementSize(data.dtype());
  const size_t bytes = data.nbytes();
  char* mine = static_cast<char*>(data.data());
  std::memcpy(slot(rank_, bytes), mine, bytes);
  DK_RETURN_IF_ERROR(Step(ctx));
  if (rank_ == root) FoldSlots(fn, 0, bytes, bytes, elem, mine);
  turn_ ^= 1;
  return absl::OkStatus();
}

// Per slot-sized chunk: every rank copies the chunk in; after a step each
// rank folds its 1/size slice of it from every slot (all ranks in parallel)
// and publishes the result in its own slot; after a second step every rank
// (or only the root) copies the others' reduced slices out. Per rank that is
// one copy in, 1/size of the folding and one copy out, instead of folding
// the whole chunk size - 1 times.
absl::Status ShmBackend::ReduceBySlices(const OpContext& ctx, TensorRef data,
                                        ReduceFn fn, int root) {
  const size_t elem = ElementSize(data.dtype());
  const int64_t chunk_elems = slot_bytes_ / elem;
  char* base = static_cast<char*>(data.data());
  const bool receives = root < 0 || root == rank_;
  for (int64_t at = 0; at < data.numel(); at += chunk_elems) {
    const int64_t n = std::min<int64_t>(chunk_elems, data.numel() - at);
    const size_t bytes = n * elem;
    char* mine = base + at * elem;
    char* own = slot(rank_, bytes);
    std::memcpy(own, mine, bytes);
    DK_RETURN_IF_ERROR(Step(ctx));
    const size_t lo = SliceBegin(n, rank_, size_) * elem;
    const size_t len = SliceBegin(n, rank_ + 1, size_) * elem - lo;
    if (len > 0) {
      // Folded into this rank's own buffer when it keeps the result, else
      // into scratch; the own slot is one of the inputs until it is done.
      char* out = mine + lo;
      if (!receives) {
        if (scratch_.size() < len) scratch_.resize(len);
        out = scratch_.data();
      }
      FoldSlots(fn, lo, len, bytes, elem, out);
      if (root < 0 || rank_ != root) std::memcpy(own + lo, out, len);
    }
    DK_RETURN_IF_ERROR(Step(ctx));
    if (receives) {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const size_t r_lo = SliceBegin(n, r, size_) * elem;
        const size_t r_len = SliceBegin(n, r + 1, size_) * elem - r_lo;
        std::memcpy(mine + r_lo, slot(r, bytes) + r_lo, r_len);
      }
    }
    turn_ ^= 1;
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                   int root) {
  char* base = static_cast<char*>(data.data());
  if (TakeInline(data.nbytes())) {
    if (rank_ != root) {
      std::memcpy(base, slot(root, data.nbytes(), inline_turn_), data.nbytes());
    }
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(bool single_copy,
                      UseSingleCopy(ctx, OpCode::kBroadcast, data.nbytes()));
  if (single_copy) {
    // The copying is shared: the root writes the first 1/size of its buffer
    // into every reader's, while each reader reads the rest of the root's.
    // Both then move (size - 1)/size of the buffer, where the root alone
    // idled and the readers moved all of it.
    DK_RETURN_IF_ERROR(PublishForSingleCopy(ctx, OpCode::kBroadcast, base));
    const size_t pushed =
        SliceBegin(data.numel(), 1, size_) * ElementSize(data.dtype());
    if (rank_ == root) {
      for (int i = 1; i < size_; ++i) {
        absl::Status write =
            WritePeer(ctx, (root + i) % size_, 0, base, pushed);
        if (!write.ok()) return FailGroup(write);
      }
    } else {
      absl::Status read =
          ReadPeer(ctx, root, pushed, base + pushed, data.nbytes() - pushed);
      if (!read.ok()) return FailGroup(read);
    }
    return Step(ctx);
  }
  // The readers copy chunk k while the root writes chunk k + 1, so what is
  // not overlapped is the root's first chunk and the readers' last. With a
  // core per rank, chunks start small and double up to a slot: the readers
  // start after a short copy instead of a whole slot's, for a few more steps.
  // With more ranks than cores a step costs a context switch, and whole
  // slots are faster.
  size_t chunk = oversubscribed_ ? slot_bytes_
                                 : std::min(slot_bytes_, kFirstBroadcastChunk);
  for (size_t at = 0, n = 0; at < data.nbytes(); at += n) {
    n = std::min(chunk, data.nbytes() - at);
    if (rank_ == root) std::memcpy(slot(rank_, n), base + at, n);
    DK_RETURN_IF_ERROR(Step(ctx));
    if (rank_ != root) std::memcpy(base + at, slot(root, n), n);
    turn_ ^= 1;
    chunk = std::min(slot_bytes_, 2 * chunk);
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::AllGather(const OpContext& ctx, TensorRef input,
                                   TensorRef output) {
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  const size_t part = input.nbytes();
  if (TakeInline(part)) {
    for (int r = 0; r < size_; ++r) {
      std::memcpy(out + r * part, slot(r, part, inline_turn_), part);
    }
    return absl::OkStatus();
  }
  DK_ASSIGN_OR_RETURN(bool single_copy,
                      UseSingleCopy(ctx, OpCode::kAllGather, output.nbytes()));
  if (single_copy) {
    // Each rank writes its part into every peer's output, piece by piece,
    // so that each piece of the input is read from memory once for its own
    // part and every peer's (a written piece also stays in the writer's
    // cache until its reader touches it). The contract hands over an input
    // inside the output only at this rank's own part.
    char* own = out + rank_ * part;
    if (in != own && input.Overlaps(output)) {
      return FailGroup(absl::InvalidArgumentError(absl::StrCat(
          ctx.Describe(), " (rank ", rank_,
          "): the input overlaps another rank's part of the output")));
    }
    DK_RETURN_IF_ERROR(PublishForSingleCopy(ctx, OpCode::kAllGather, out));
    for (size_t at = 0; at < part; at += kFoldPieceBytes) {
      const size_t len = std::min(kFoldPieceBytes, part - at);
      if (own != in) std::memcpy(own + at, in + at, len);
      for (int i = 1; i < size_; ++i) {
        const int r = (rank_ + i) % size_;  // spread the writers over the ranks
        absl::Status written =
            WritePeer(ctx, r, rank_ * part + at, in + at, len);
        if (!written.ok()) return FailGroup(written);
      }
    }
    return Step(ctx);
  }
  for (size_t at = 0; at < part; at += slot_bytes_) {
    const size_t n = std::min(slot_bytes_, part - at);
    std::memcpy(slot(rank_, n), in + at, n);
    DK_RETURN_IF_ERROR(Step(ctx));
    for (int r = 0; r < size_; ++r)
      std::memcpy(out + r * part + at, slot(r, n), n);
    turn_ ^= 1;
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::Exchange(const OpContext& ctx, const Pieces& p) {
  // Each slot is cut into one region per destination; a round moves up to
  // `window` bytes of every pair's piece. The window is the same on every
  // rank (it depends only on p.most and the group).
  size_t window = slot_bytes_ / size_;
  window = window / 64 * 64;  // >= 64: size_ <= kMaxRanks
  if (p.most * size_ <= kSmallSlotBytes) window = p.most;
  if (window == 0) return absl::OkStatus();  // nothing to move anywhere
  const size_t slot_bytes = window * size_;
  for (size_t at = 0; at < p.most; at += window) {
    char* own = slot(rank_, slot_bytes);
    for (int d = 0; d < size_ && !p.send_len.empty(); ++d) {
      if (at < p.send_len[d]) {
        std::memcpy(own + d * window, p.send + p.send_off[d] + at,
                    std::min(window, p.send_len[d] - at));
      }
    }
    DK_RETURN_IF_ERROR(Step(ctx));
    const size_t region = rank_ * window;
    if (p.fn != nullptr) {
      if (at < p.recv_len[0]) {
        FoldSlots(p.fn, region, std::min(window, p.recv_len[0] - at),
                  slot_bytes, p.elem, p.recv + at);
      }
    } else {
      for (int s = 0; s < size_ && !p.recv_len.empty(); ++s) {
        if (at < p.recv_len[s]) {
          std::memcpy(p.recv + p.recv_off[s] + at, slot(s, slot_bytes) + region,
                      std::min(window, p.recv_len[s] - at));
        }
      }
    }
    turn_ ^= 1;
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> ShmBackend::MaxOverRanks(const OpContext& ctx,
                                                size_t mine) {
  const uint64_t v = mine;
  std::memcpy(slot(rank_, sizeof(v)), &v, sizeof(v));
  DK_RETURN_IF_ERROR(Step(ctx));
  uint64_t most = 0;
  for (int r = 0; r < size_; ++r) {
    uint64_t theirs;
    std::memcpy(&theirs, slot(r, sizeof(v)), sizeof(v));
    most = std::max(most, theirs);
  }
  turn_ ^= 1;
  return static_cast<size_t>(most);
}

absl::Status ShmBackend::Gather(const OpContext& ctx, TensorRef input,
                                TensorRef output, int root) {
  const size_t part = input.nbytes();
  DK_ASSIGN_OR_RETURN(bool single_copy,
                      UseSingleCopy(ctx, OpCode::kGather, part * size_));
  if (single_copy) {
    // Each rank writes its part into the root's output. The root copies its
    // own first: its input may lie in the output, where the others write.
    char* out = static_cast<char*>(output.data());
    if (rank_ == root) std::memmove(out + root * part, input.data(), part);
    DK_RETURN_IF_ERROR(PublishForSingleCopy(ctx, OpCode::kGather, out));
    if (rank_ != root) {
      absl::Status written =
          WritePeer(ctx, root, rank_ * part, input.data(), part);
      if (!written.ok()) return FailGroup(written);
    }
    return Step(ctx);
  }
  Pieces p;
  p.most = part;
  p.elem = ElementSize(input.dtype());
  p.send = static_cast<const char*>(input.data());
  p.send_off.assign(size_, 0);
  p.send_len.assign(size_, 0);
  p.send_len[root] = part;
  if (rank_ == root) {
    p.recv = static_cast<char*>(output.data());
    for (int s = 0; s < size_; ++s) p.recv_off.push_back(s * part);
    p.recv_len.assign(size_, part);
  }
  return Exchange(ctx, p);
}

absl::Status ShmBackend::Scatter(const OpContext& ctx, TensorRef input,
                                 TensorRef output, int root) {
  const size_t part = output.nbytes();
  DK_ASSIGN_OR_RETURN(bool single_copy,
                      UseSingleCopy(ctx, OpCode::kScatter, part * size_));
  if (single_copy) {
    // Each rank reads its part from the root's input. The root copies its
    // own last when its output lies in the input, which the others read.
    const char* in = static_cast<const char*>(input.data());
    char* out = static_cast<char*>(output.data());
    const bool inside = rank_ == root && output.Overlaps(input);
    if (rank_ == root && !inside) std::memcpy(out, in + root * part, part);
    DK_RETURN_IF_ERROR(PublishForSingleCopy(ctx, OpCode::kScatter, in));
    if (rank_ != root) {
      absl::Status read = ReadPeer(ctx, root, rank_ * part, out, part);
      if (!read.ok()) return FailGroup(read);
    }
    DK_RETURN_IF_ERROR(Step(ctx));
    if (inside) std::memmove(out, in + root * part, part);
    return absl::OkStatus();
  }
  Pieces p;
  p.most = part;
  p.elem = ElementSize(output.dtype());
  if (rank_ == root) {
    p.send = static_cast<const char*>(input.data());
    for (int d = 0; d < size_; ++d) p.send_off.push_back(d * part);
    p.send_len.assign(size_, part);
  }
  p.recv = static_cast<char*>(output.data());
  p.recv_off.assign(size_, 0);
  p.recv_len.assign(size_, 0);
  p.recv_len[root] = part;
  return Exchange(ctx, p);
}

absl::Status ShmBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                       TensorRef output, ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(output.dtype(), op));
  const size_t part = output.nbytes();
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  DK_ASSIGN_OR_RETURN(
      bool single_copy,
      UseSingleCopy(ctx, OpCode::kReduceScatter, input.nbytes()));
  if (single_copy) {
    // The contract hands over an output inside the input never: it would be
    // written while the peers read the input.
    if (output.Overlaps(input)) {
      return FailGroup(absl::InvalidArgumentError(
          absl::StrCat(ctx.Describe(), " (rank ", rank_,
                       "): the output overlaps the input")));
    }
    DK_RETURN_IF_ERROR(PublishForSingleCopy(ctx, OpCode::kReduceScatter, in));
    absl::Status folded =
        FoldPeers(ctx, fn, rank_ * part, part, ElementSize(output.dtype()),
                  in + rank_ * part, out);
    if (!folded.ok()) return FailGroup(folded);
    return Step(ctx);
  }
  Pieces p;
  p.most = part;
  p.elem = ElementSize(output.dtype());
  p.fn = fn;
  p.send = static_cast<const char*>(input.data());
  for (int d = 0; d < size_; ++d) p.send_off.push_back(d * part);
  p.send_len.assign(size_, part);
  p.recv = static_cast<char*>(output.data());
  p.recv_off.assign(size_, 0);
  p.recv_len.assign(size_, part);
  return Exchange(ctx, p);
}

absl::Status ShmBackend::AllToAll(const OpContext& ctx, TensorRef input,
                                  absl::Span<const int64_t> input_splits,
                                  TensorRef output,
                                  absl::Span<const int64_t> output_splits) {
  const size_t elem = ElementSize(input.dtype());
  Pieces p;
  p.elem = elem;
  p.send = static_cast<const char*>(input.data());
  p.recv = static_cast<char*>(output.data());
  // Empty splits are equal parts of the tensor.
  auto lay_out = [&](absl::Span<const int64_t> splits, size_t total,
                     std::vector<size_t>* off, std::vector<size_t>* len) {
    size_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const size_t n = splits.empty() ? total / size_ : splits[r] * elem;
      off->push_back(at);
      len->push_back(n);
      at += n;
    }
  };
  lay_out(input_splits, input.nbytes(), &p.send_off, &p.send_len);
  lay_out(output_splits, output.nbytes(), &p.recv_off, &p.recv_len);
  if (input_splits.empty() && output_splits.empty()) {
    p.most = input.nbytes() / size_;
  } else {
    // The largest piece any pair sends bounds the rounds every rank runs.
    size_t mine = 0;
    for (size_t n : p.send_len) mine = std::max(mine, n);
    DK_ASSIGN_OR_RETURN(p.most, MaxOverRanks(ctx, mine));
  }
  return Exchange(ctx, p);
}

}  // namespace distkit
