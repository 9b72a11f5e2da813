#include "cc/comm/shm/shm_backend.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/comm/shm/futex.h"
#include "cc/core/status.h"

namespace distkit {

// What every rank of the group shares, first in the segment: how many step
// arrivals there have been (each rank adds one per step, so step s is
// complete at s * size), and the futex word the last arrival of a step sets
// to the step's low half and wakes the sleepers on.
struct alignas(128) ShmBackend::GroupHeader {
  std::atomic<uint64_t> arrivals;
  std::atomic<uint32_t> completed_word;
  std::atomic<uint32_t> sleepers;
};

struct alignas(128) ShmBackend::Header {
  std::atomic<uint64_t> step;  // the last step this rank published
  LivenessRecord liveness;
  // Signatures, by step parity: a rank rewrites one only after every rank
  // has published a later step, i.e. finished reading it.
  OpSignature sig[2];
};

namespace {

std::string HostIdentity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return absl::StrCat(host, "/", boot);
}

size_t SegmentBytes(int size, size_t group_header, size_t header) {
  return group_header + size * header + size * 2 * ShmBackend::kSmallSlotBytes +
         size * 2 * ShmBackend::SlotBytesFor(size);
}

// A wait first spins (a peer on another core answers within a microsecond),
// then yields (ranks may share cores) for kYieldPhase, then sleeps on the
// group's futex word in slices of kSleepSlice, between which it checks the
// deadline, an abort and the liveness of the ranks that have not arrived.
constexpr int kPureSpins = 256;
constexpr absl::Duration kYieldPhase = absl::Microseconds(200);
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
  if (size < 2 || (env != nullptr && std::string(env) == "0")) {
    return make_gloo(false);
  }
  // Same host (and same boot) for every rank?
  DK_RETURN_IF_ERROR(store->Set(absl::StrCat("host/", rank), HostIdentity()));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(absl::StrCat("host/", r));
  DK_ASSIGN_OR_RETURN(std::vector<std::string> hosts,
                      store->MultiGetWithTimeout(keys, timeout));
  for (const std::string& h : hosts) {
    if (h != hosts[0]) return make_gloo(false);
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
  StartHeartbeat(&b->header(rank)->liveness);
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

char* ShmBackend::slot(int r, uint64_t step, size_t bytes) const {
  char* small =
      static_cast<char*>(base_) + sizeof(GroupHeader) + size_ * sizeof(Header);
  if (bytes <= kSmallSlotBytes) {
    return small + ((step & 1) * size_ + r) * kSmallSlotBytes;
  }
  return small + 2 * size_ * kSmallSlotBytes +
         (2 * r + (step & 1)) * slot_bytes_;
}

void ShmBackend::Abort() {
  aborted_ = true;
  // This rank's waits end now (other ranks' sleepers wake spuriously and
  // sleep again).
  FutexWakeAll(&group_header()->completed_word);
  gloo_->Abort();
}

absl::Status ShmBackend::Step(const OpContext& ctx) {
  const uint64_t step = ++step_;
  // Each rank's own step stays published for the liveness check and the
  // diagnosis of who is late; the wait itself reads the group's count.
  header(rank_)->step.store(step, std::memory_order_release);
  GroupHeader* g = group_header();
  const uint64_t complete = step * static_cast<uint64_t>(size_);
  // acq_rel: this rank's slot writes are released with its arrival, and a
  // rank that sees the count complete has acquired everyone's. No rank can
  // arrive for the next step before this one completes, so the arrival that
  // completes it is the one that sees complete - 1.
  if (g->arrivals.fetch_add(1, std::memory_order_acq_rel) + 1 == complete) {
    // Sequentially consistent with a sleeper's count-then-look: either it
    // sees the new word (and does not sleep) or this sees it counted.
    g->completed_word.store(static_cast<uint32_t>(step));
    if (g->sleepers.load() != 0) FutexWakeAll(&g->completed_word);
    return absl::OkStatus();
  }
  const absl::Time deadline = absl::Now() + ctx.timeout;
  const absl::Duration slice =
      ScaledBySize(kSleepSlice, size_, absl::Milliseconds(100));
  const absl::Duration liveness_interval =
      ScaledBySize(kLivenessInterval, size_, absl::Milliseconds(500));
  absl::Time next_liveness = absl::Now() + liveness_interval;
  absl::Time sleep_from = absl::InfiniteFuture();
  for (uint64_t spins = 0;
       g->arrivals.load(std::memory_order_acquire) < complete; ++spins) {
    if (spins < kPureSpins) continue;
    const absl::Time now = absl::Now();
    if (sleep_from == absl::InfiniteFuture()) sleep_from = now + kYieldPhase;
    if (now < sleep_from) {
      sched_yield();
      if ((spins & 63) != 0) continue;
    } else {
      // One word for the whole group: a step costs each sleeper one wake-up,
      // however many ranks arrive after it.
      g->sleepers.fetch_add(1);
      const uint32_t seen = g->completed_word.load();
      if (g->arrivals.load(std::memory_order_acquire) < complete && !aborted_) {
        FutexWait(&g->completed_word, seen, slice);
      }
      g->sleepers.fetch_sub(1);
    }
    if (aborted_) {
      return absl::CancelledError(
          absl::StrCat(ctx.Describe(), ": the group was aborted"));
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
      int first_missing = -1;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ &&
            header(r)->step.load(std::memory_order_acquire) < step) {
          first_missing = r;
          break;
        }
      }
      int rotating = -1;
      for (int i = 1; first_missing >= 0 && i <= size_; ++i) {
        const int r = (liveness_cursor_ + i) % size_;
        if (r != rank_ && r != first_missing &&
            header(r)->step.load(std::memory_order_acquire) < step) {
          rotating = r;
          break;
        }
      }
      if (rotating >= 0) liveness_cursor_ = rotating;
      for (int r : {first_missing, rotating}) {
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
  return absl::OkStatus();
}

absl::Status ShmBackend::ExchangeSignatures(const OpContext& ctx,
                                            const OpSignature& mine,
                                            InlinePayload /*payload*/,
                                            absl::Span<OpSignature> all) {
  header(rank_)->sig[(step_ + 1) & 1] = mine;
  DK_RETURN_IF_ERROR(Step(ctx));
  for (int r = 0; r < size_; ++r) all[r] = header(r)->sig[step_ & 1];
  return absl::OkStatus();
}

// ---- Collectives ---------------------------------------------------------

absl::Status ShmBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                   ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(data.dtype(), op));
  const size_t elem = ElementSize(data.dtype());
  const size_t chunk_elems = slot_bytes_ / elem;
  char* base = static_cast<char*>(data.data());
  for (int64_t at = 0; at < data.numel(); at += chunk_elems) {
    const int64_t n = std::min<int64_t>(chunk_elems, data.numel() - at);
    const size_t bytes = n * elem;
    char* mine = base + at * elem;
    std::memcpy(slot(rank_, step_ + 1, bytes), mine, bytes);
    DK_RETURN_IF_ERROR(Step(ctx));
    // Every rank folds the same slots in rank order: identical results.
    std::memcpy(mine, slot(0, step_, bytes), bytes);
    for (int r = 1; r < size_; ++r) fn(mine, mine, slot(r, step_, bytes), n);
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::Reduce(const OpContext& ctx, TensorRef data,
                                ReduceOp op, int root) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(data.dtype(), op));
  const size_t elem = ElementSize(data.dtype());
  const size_t chunk_elems = slot_bytes_ / elem;
  char* base = static_cast<char*>(data.data());
  for (int64_t at = 0; at < data.numel(); at += chunk_elems) {
    const int64_t n = std::min<int64_t>(chunk_elems, data.numel() - at);
    const size_t bytes = n * elem;
    char* mine = base + at * elem;
    std::memcpy(slot(rank_, step_ + 1, bytes), mine, bytes);
    DK_RETURN_IF_ERROR(Step(ctx));
    if (rank_ != root) continue;
    std::memcpy(mine, slot(0, step_, bytes), bytes);
    for (int r = 1; r < size_; ++r) fn(mine, mine, slot(r, step_, bytes), n);
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                   int root) {
  char* base = static_cast<char*>(data.data());
  for (size_t at = 0; at < data.nbytes(); at += slot_bytes_) {
    const size_t n = std::min(slot_bytes_, data.nbytes() - at);
    if (rank_ == root) std::memcpy(slot(rank_, step_ + 1, n), base + at, n);
    DK_RETURN_IF_ERROR(Step(ctx));
    if (rank_ != root) std::memcpy(base + at, slot(root, step_, n), n);
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::AllGather(const OpContext& ctx, TensorRef input,
                                   TensorRef output) {
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  const size_t part = input.nbytes();
  for (size_t at = 0; at < part; at += slot_bytes_) {
    const size_t n = std::min(slot_bytes_, part - at);
    std::memcpy(slot(rank_, step_ + 1, n), in + at, n);
    DK_RETURN_IF_ERROR(Step(ctx));
    for (int r = 0; r < size_; ++r)
      std::memcpy(out + r * part + at, slot(r, step_, n), n);
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::Gather(const OpContext& ctx, TensorRef input,
                                TensorRef output, int root) {
  const size_t bytes = input.nbytes();
  if (bytes > slot_bytes_) return gloo_->Gather(ctx, input, output, root);
  std::memcpy(slot(rank_, step_ + 1, bytes), input.data(), bytes);
  DK_RETURN_IF_ERROR(Step(ctx));
  if (rank_ == root) {
    for (int r = 0; r < size_; ++r) {
      std::memcpy(static_cast<char*>(output.data()) + r * bytes,
                  slot(r, step_, bytes), bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status ShmBackend::Scatter(const OpContext& ctx, TensorRef input,
                                 TensorRef output, int root) {
  const size_t part = output.nbytes();
  const size_t bytes = part * size_;
  if (bytes > slot_bytes_) return gloo_->Scatter(ctx, input, output, root);
  if (rank_ == root)
    std::memcpy(slot(rank_, step_ + 1, bytes), input.data(), bytes);
  DK_RETURN_IF_ERROR(Step(ctx));
  std::memcpy(output.data(), slot(root, step_, bytes) + rank_ * part, part);
  return absl::OkStatus();
}

absl::Status ShmBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                       TensorRef output, ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(output.dtype(), op));
  const size_t bytes = input.nbytes();
  if (bytes > slot_bytes_) {
    return gloo_->ReduceScatter(ctx, input, output, op);
  }
  std::memcpy(slot(rank_, step_ + 1, bytes), input.data(), bytes);
  DK_RETURN_IF_ERROR(Step(ctx));
  const size_t part = output.nbytes();
  char* out = static_cast<char*>(output.data());
  std::memcpy(out, slot(0, step_, bytes) + rank_ * part, part);
  for (int r = 1; r < size_; ++r)
    fn(out, out, slot(r, step_, bytes) + rank_ * part, output.numel());
  return absl::OkStatus();
}

absl::Status ShmBackend::AllToAll(const OpContext& ctx, TensorRef input,
                                  absl::Span<const int64_t> input_splits,
                                  TensorRef output,
                                  absl::Span<const int64_t> output_splits) {
  const bool uneven = !input_splits.empty() || !output_splits.empty();
  const size_t bytes = input.nbytes();
  if (uneven || bytes > slot_bytes_) {
    return gloo_->AllToAll(ctx, input, input_splits, output, output_splits);
  }
  std::memcpy(slot(rank_, step_ + 1, bytes), input.data(), bytes);
  DK_RETURN_IF_ERROR(Step(ctx));
  const size_t part = bytes / size_;
  for (int r = 0; r < size_; ++r) {
    std::memcpy(static_cast<char*>(output.data()) + r * part,
                slot(r, step_, bytes) + rank_ * part, part);
  }
  return absl::OkStatus();
}

}  // namespace distkit
