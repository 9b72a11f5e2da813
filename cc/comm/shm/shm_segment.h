// The shared-memory segment of a same-host group (ShmBackend): its layout and
// its mapping. First a GroupHeader every rank shares, then one RankHeader per
// rank (its step counter, liveness, published buffer and, per turn, its
// signature and a packed small slot), then two data slots per rank used in
// turn. ShmLayout is a plain view (copied into whoever reads the segment,
// so a slot's address costs no indirection); ShmMapping owns the mapping.

#ifndef DISTKIT_CC_COMM_SHM_SHM_SEGMENT_H_
#define DISTKIT_CC_COMM_SHM_SHM_SEGMENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cc/comm/op_signature.h"
#include "cc/comm/shm/peer_liveness.h"
#include "cc/store/store.h"

namespace distkit {

// A step whose slot holds at most this much uses a packed slot instead, in
// the rank's header beside its signature: the headers share a few pages, so
// a small collective touches O(N) bytes of the segment per rank, not N
// pages, and a tiny payload travels in the signature's cache line.
inline constexpr size_t kSmallSlotBytes = 256;

// How many eager operations (eager_exchange.h: a small rooted operation
// whose senders do not wait for its receivers) a rank may run ahead of the
// slowest rank: each rank's header holds this many eager entries, used in
// turn, and an entry is written again only after every rank has read it.
// 64: with more ranks than cores a receiver given the core drains many
// entries per switch (a 4-byte broadcast at 4 ranks on 2 cores: 3.5 us with
// 8 entries, 1.8-2.0 with 64); 24 KiB per rank.
inline constexpr int kEagerDepth = 64;

// What every rank of the group shares, first in the segment: the futex word
// an arriving rank bumps and wakes when some rank sleeps in a wait, and how
// many ranks sleep (arrivals that see none make no system call).
struct alignas(128) ShmGroupHeader {
  std::atomic<uint32_t> wake_word;
  std::atomic<uint32_t> sleepers;
  // 1 + the rank that failed inside an operation and will not arrive (a
  // single-copy read refused: ShmSteps::FailGroup, the first kept), or
  // -(1 + the rank) whose retracted single-copy buffer a copier found
  // (ShmSteps::MarkRetractedBy: set only where nothing is, replaced by a
  // FailGroup); 0: none. Every wait of every rank then ends with an error.
  std::atomic<int32_t> failed_by;
  // Written by rank 0 before any other rank reads them (they read after
  // every rank has said it attached), so that every rank picks the same
  // algorithms: DISTKIT_SHM_SINGLE_COPY=1 in rank 0's environment, and
  // whether the group has more ranks than the host has CPUs online.
  uint32_t single_copy_everywhere;
  uint32_t oversubscribed;
  // Whether small rooted operations take eager steps (eager_exchange.h):
  // DISTKIT_SHM_EAGER=1 in rank 0's environment.
  uint32_t eager;
};

// ShmRankHeader::buffer of a rank that retracted its buffer (never an
// address of a user's buffer: the top of the address space is the kernel's).
inline constexpr uint64_t kRetractedBuffer = ~uint64_t{0};

struct alignas(128) ShmRankHeader {
  std::atomic<uint64_t> step;  // the last step this rank published
  LivenessRecord liveness;
  // Single copy: the address (in this rank's process) of the buffer of the
  // current operation, published before the step after which peers read it
  // and read by them before they arrive at the operation's last step; 0
  // when the rank published none (its call went another way). A rank that
  // leaves a single-copy operation with an error first retracts it (stores
  // kRetractedBuffer) and waits for the peers copying with it
  // (`copying_with`).
  std::atomic<uint64_t> buffer;
  // The probe: a peer reads `probe_token` at `probe_addr` in this rank's
  // process and compares it with what the segment says.
  std::atomic<uint64_t> probe_token;
  std::atomic<uint64_t> probe_addr;
  // 1 + the rank whose published buffer this rank is copying to or from
  // right now (0: none). Set before reading that rank's `buffer` and
  // copying (seq_cst, as the owner's retraction and its look here), cleared
  // after: an owner that retracted its buffer and then sees no copier
  // naming it knows that no copy into or out of it is in flight or will
  // start. On a line of its own (the second of the pair before the turns):
  // written twice per copy, it would otherwise take `step`'s line, which
  // the peers poll, away from them.
  alignas(64) std::atomic<uint32_t> copying_with;
  // By turn (the two turns of the slots): this rank's signature for the
  // exchange made in that turn, a copy of `step` as of its last step in that
  // turn, and its packed small slot. A peer waiting for a step polls the
  // line it will read next: the signature, the step, the chain and a
  // payload of up to 8 bytes share one cache line (and the next line comes
  // with it, 128-byte aligned pairs), so a small operation costs each peer
  // one cache miss per rank it hears from. A turn is rewritten only after
  // every rank has published a later step, i.e. finished reading it (as
  // every slot). `chain`: this rank's hash of the eager operations it has
  // taken so far (eager_exchange.h), which every exchange compares.
  struct alignas(128) Turn {
    OpSignature sig;
    std::atomic<uint64_t> step;
    uint64_t chain;
    alignas(8) char small[kSmallSlotBytes];
  };
  Turn turns[2];
};

// A rank's eager entries (eager_exchange.h), the same records as the turns:
// the one of step s is entries[s % kEagerDepth], its `step` set to s when
// its sender published it. Apart from the turns (an eager step leaves the
// turns and the slots alone, so the step protocol's own rule for them
// holds) and from the rank headers, after all of them: the headers stay a
// few pages that every rank polls, and a group without eager steps never
// touches these pages (24 KiB per rank).
struct ShmEagerRing {
  ShmRankHeader::Turn entries[kEagerDepth];
};
static_assert(offsetof(ShmRankHeader, turns) == 128,
              "the rank header's fields before its turns fit one line pair");

// Where everything is in one mapping of the segment.
class ShmLayout {
 public:
  // Bytes of one data slot (a chunk of a pipelined operation):
  // kMaxSlotBytes in small groups; larger groups get smaller slots, so that
  // the segment (two slots per rank) stays within kSlotBudgetBytes.
  static constexpr size_t kMaxSlotBytes = size_t{1} << 20;
  static constexpr size_t kMinSlotBytes = size_t{64} << 10;
  static constexpr size_t kSlotBudgetBytes = size_t{256} << 20;
  static size_t SlotBytesFor(int size);
  // The whole segment of a group of `size` ranks.
  static size_t SegmentBytesFor(int size);

  ShmLayout(void* base, int size)
      : base_(static_cast<char*>(base)),
        size_(size),
        slot_bytes_(SlotBytesFor(size)) {}

  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }  // SlotBytesFor(size())

  ShmGroupHeader* group() const {
    return reinterpret_cast<ShmGroupHeader*>(base_);
  }
  ShmRankHeader* header(int r) const {
    return reinterpret_cast<ShmRankHeader*>(base_ + sizeof(ShmGroupHeader) +
                                            r * sizeof(ShmRankHeader));
  }
  // Rank r's eager entry of `step`.
  ShmRankHeader::Turn* eager(int r, uint64_t step) const {
    auto* rings = reinterpret_cast<ShmEagerRing*>(
        base_ + sizeof(ShmGroupHeader) + size_ * sizeof(ShmRankHeader));
    return &rings[r].entries[step % kEagerDepth];
  }
  // Rank r's slot of `turn`, for a chunk whose slots hold `bytes` (the same
  // on every rank): a packed small slot, or a full one.
  char* slot(int r, size_t bytes, int turn) const {
    if (bytes <= kSmallSlotBytes) return header(r)->turns[turn].small;
    char* full = base_ + sizeof(ShmGroupHeader) +
                 size_ * (sizeof(ShmRankHeader) + sizeof(ShmEagerRing));
    return full + (2 * r + turn) * slot_bytes_;
  }

 private:
  char* base_;
  int size_;
  size_t slot_bytes_;
};

// One rank's mapping of its group's segment; unmapped when destroyed.
class ShmMapping {
 public:
  // Rank 0's answers, which it writes into the GroupHeader for every rank.
  struct GroupChoices {
    bool single_copy_everywhere = false;
    bool oversubscribed = false;
    bool eager = false;
  };

  // Collective over `size` ranks of one host: rank 0 creates a segment and
  // names it through `store`, every rank maps it, and all say whether they
  // did. nullptr on every rank alike when any could not (no room in
  // /dev/shm, a refused mapping): the group stays on TCP.
  static absl::StatusOr<std::unique_ptr<ShmMapping>> Map(
      Store& store, int rank, int size, const GroupChoices& rank0_choices,
      absl::Duration timeout);
  ~ShmMapping();
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;

  const ShmLayout& layout() const { return layout_; }

 private:
  ShmMapping(void* base, size_t bytes, int size)
      : base_(base), bytes_(bytes), layout_(base, size) {}

  void* const base_;
  const size_t bytes_;
  const ShmLayout layout_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SHM_SEGMENT_H_
