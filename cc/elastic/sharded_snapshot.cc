#include "cc/elastic/sharded_snapshot.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/data_type.h"
#include "cc/core/status.h"
#include "cc/elastic/host_collectives.h"

namespace distkit {
namespace elastic {
namespace {

constexpr int64_t kAlign = 64;  // each buffer of a blob starts here

int64_t Aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int64_t HeaderBytes(int64_t count) { return Aligned(8 * (1 + count)); }

// FNV-1a over the registered names, so that members compare registrations
// with one number.
int64_t NamesFingerprint(const BufferLayout& layout) {
  uint64_t h = 1469598103934665603ull;
  for (const BufferLayout::Buffer& b : layout.buffers()) {
    for (char c : b.name)
      h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

// A member's card for Fetch: the commits it holds (in force, pending), each
// with its group's size, its own shard index and the shards it holds with
// their sizes; then whether it wants every shard and how many it names.
constexpr int kSlots = 2;
constexpr int kSlotFields = 8;  // number, world, own, held, (index, bytes) x2
// ... then the registration's fingerprint (0 for a snapshot holding none).
constexpr int kCardFields = 1 + kSlots * kSlotFields + 3;
constexpr int kFingerprintField = kCardFields - 3;

// One shard of one commit as some member holds it.
struct Holding {
  int member;
  int64_t commit;
  int64_t world;
  int index;
  int64_t bytes;
};

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrJoin(ranks, ", ");
}

absl::Status StoppedForTesting() {
  return absl::UnavailableError(
      "sharded snapshot commit: stopped here for a test (as a lost rank)");
}

}  // namespace

absl::Status ShardedSnapshot::Register(absl::string_view name, void* data,
                                       int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return buffers_.Register(name, data, bytes);
}

absl::StatusOr<ShardedSnapshot::Blob> ShardedSnapshot::PackLocked() const {
  const std::vector<BufferLayout::Buffer>& buffers =
      buffers_.layout().buffers();
  const int64_t count = static_cast<int64_t>(buffers.size());
  int64_t total = HeaderBytes(count);
  for (const BufferLayout::Buffer& b : buffers) total += Aligned(b.bytes);
  DK_ASSIGN_OR_RETURN(HostBuffer data, AllocateHost(total, "sharded snapshot"));
  std::memset(data.get(), 0, static_cast<size_t>(HeaderBytes(count)));
  std::memcpy(data.get(), &count, 8);
  int64_t at = HeaderBytes(count);
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::memcpy(data.get() + 8 * (1 + i), &buffers[i].bytes, 8);
    if (buffers[i].bytes > 0) {
      std::memcpy(data.get() + at, buffers_.data()[i], buffers[i].bytes);
    }
    // The padding to the next boundary travels too: zeros, never
    // uninitialised memory.
    std::memset(
        data.get() + at + buffers[i].bytes, 0,
        static_cast<size_t>(Aligned(buffers[i].bytes) - buffers[i].bytes));
    at += Aligned(buffers[i].bytes);
  }
  Blob blob;
  blob.data = std::shared_ptr<char[]>(std::move(data));
  blob.bytes = total;
  return blob;
}

const ShardedSnapshot::CommitCopy* ShardedSnapshot::FindLocked(
    int64_t number) const {
  if (in_force_ && in_force_->number == number) return &*in_force_;
  if (pending_ && pending_->number == number) return &*pending_;
  return nullptr;
}

absl::Status ShardedSnapshot::Commit(ProcessGroup& group) {
  absl::MutexLock lock(&mu_);
  if (!group.is_member()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sharded snapshot commit: this rank is not a member of "
                     "group '",
                     group.name(), "'"));
  }
  buffers_.Freeze();
  const int n = group.size();
  const int me = group.rank();
  absl::StatusOr<Blob> packed = PackLocked();
  DK_RETURN_IF_ERROR(
      AgreeReady(group, packed.status(), "sharded snapshot commit"));
  Blob own = *std::move(packed);
  // 1. Every member's newest commit, shard size, registration and the size
  // of the group its commits were laid out on (0: none yet).
  constexpr int kCard = 4;
  int64_t newest = 0, laid_out_on = 0;
  if (in_force_) {
    newest = std::max(newest, in_force_->number);
    laid_out_on = in_force_->world;
  }
  if (pending_) {
    newest = std::max(newest, pending_->number);
    laid_out_on = pending_->world;
  }
  int64_t mine[kCard] = {newest, own.bytes, NamesFingerprint(buffers_.layout()),
                         laid_out_on};
  std::vector<int64_t> cards(kCard * static_cast<size_t>(n));
  DK_RETURN_IF_ERROR(
      AllGatherHost(group, mine, cards.data(), kCard, DataType::kInt64));
  std::vector<int> differ, resized;
  int64_t number = 0;
  for (int r = 0; r < n; ++r) {
    const int64_t* card = &cards[kCard * static_cast<size_t>(r)];
    if (card[2] != cards[2]) differ.push_back(r);
    if (card[3] != 0 && card[3] != n) resized.push_back(r);
    number = std::max(number, card[0] + 1);
  }
  if (!differ.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sharded snapshot commit on group '", group.name(),
                     "': rank(s) ", RankList(differ),
                     " registered other buffers (names or order) than rank 0"));
  }
  if (!resized.empty()) {
    // Its buffers are the old layout's shards, which the trainer replaced.
    return absl::FailedPreconditionError(absl::StrCat(
        "sharded snapshot commit on group '", group.name(), "' (", n,
        " ranks): rank(s) ", RankList(resized),
        " hold commits of a group of another size in this snapshot; after "
        "a change of membership, commit a new snapshot of the new layout"));
  }
  // 2. This rank's shard is part of the new commit at once; its
  // neighbour's once the exchange ends here.
  CommitCopy next;
  next.number = number;
  next.world = n;
  next.own = me;
  next.shards[me] = own;
  if (n > 1) {
    const int left = (me + n - 1) % n, right = (me + 1) % n;
    const int64_t incoming = cards[kCard * static_cast<size_t>(right) + 1];
    absl::StatusOr<HostBuffer> allocated =
        AllocateHost(incoming, "sharded snapshot");
    DK_RETURN_IF_ERROR(
        AgreeReady(group, allocated.status(), "sharded snapshot commit"));
    HostBuffer received = *std::move(allocated);
    // What the last Fetch gave goes once nothing can refuse the commit any
    // more (a refusal changes nothing).
    fetched_.clear();
    fetched_bytes_ = 0;
    std::vector<int64_t> send(n, 0), receive(n, 0);
    send[left] = own.bytes;
    receive[right] = incoming;
    pending_ = next;  // a failure in the exchange keeps this rank's shard
    if (stop_ == StopForTesting::kBeforeExchange) return StoppedForTesting();
    DK_RETURN_IF_ERROR(AllToAllHost(group, own.data.get(), received.get(),
                                    std::move(send), std::move(receive)));
    Blob neighbour;
    neighbour.data = std::shared_ptr<char[]>(std::move(received));
    neighbour.bytes = incoming;
    pending_->shards[right] = std::move(neighbour);
    // 3. In force once every member holds its part.
    if (stop_ == StopForTesting::kBeforeBarrier) return StoppedForTesting();
    DK_RETURN_IF_ERROR(group.Barrier());
    in_force_ = std::move(pending_);
  } else {
    fetched_.clear();
    fetched_bytes_ = 0;
    in_force_ = std::move(next);
  }
  pending_.reset();
  return absl::OkStatus();
}

absl::StatusOr<ShardedSnapshot::Fetched> ShardedSnapshot::Fetch(
    ProcessGroup& group, std::optional<std::vector<int>> wanted) {
  absl::MutexLock lock(&mu_);
  if (!group.is_member()) {
    return absl::FailedPreconditionError(
        absl::StrCat("sharded snapshot fetch: this rank is not a member of "
                     "group '",
                     group.name(), "'"));
  }
  buffers_.Freeze();
  fetched_.clear();
  fetched_bytes_ = 0;
  const int n = group.size();
  const int me = group.rank();
  // 1. Every member's card, then the shards each asks for.
  std::vector<int64_t> card(kCardFields, 0);
  int slots = 0;
  for (const std::optional<CommitCopy>* c : {&in_force_, &pending_}) {
    if (!c->has_value()) continue;
    int64_t* slot = &card[1 + slots * kSlotFields];
    slot[0] = (*c)->number;
    slot[1] = (*c)->world;
    slot[2] = (*c)->own;
    int held = 0;
    for (const auto& [index, blob] : (*c)->shards) {
      slot[4 + 2 * held] = index;
      slot[5 + 2 * held] = blob.bytes;
      ++held;
    }
    slot[3] = held;
    ++slots;
  }
  card[0] = slots;
  card[kFingerprintField] = slots > 0 ? NamesFingerprint(buffers_.layout()) : 0;
  std::vector<int64_t> asked;
  if (wanted) asked.assign(wanted->begin(), wanted->end());
  card[kCardFields - 2] = wanted ? 0 : 1;
  card[kCardFields - 1] = static_cast<int64_t>(asked.size());
  std::vector<int64_t> cards(static_cast<size_t>(kCardFields) * n);
  DK_RETURN_IF_ERROR(AllGatherHost(group, card.data(), cards.data(),
                                   kCardFields, DataType::kInt64));
  int64_t longest = 0;
  int first_holder = -1;
  std::vector<int> differ;
  for (int r = 0; r < n; ++r) {
    const int64_t* c = &cards[static_cast<size_t>(kCardFields) * r];
    longest = std::max(longest, c[kCardFields - 1]);
    if (c[0] == 0) continue;  // holds nothing (a replacement)
    if (first_holder < 0) {
      first_holder = r;
    } else if (c[kFingerprintField] !=
               cards[static_cast<size_t>(kCardFields) * first_holder +
                     kFingerprintField]) {
      differ.push_back(r);
    }
  }
  if (!differ.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharded snapshot fetch on group '", group.name(), "': rank(s) ",
        RankList(differ),
        " registered other buffers (names or order) than rank ", first_holder));
  }
  std::vector<int64_t> lists(static_cast<size_t>(longest) * n, -1);
  if (longest > 0) {
    asked.resize(static_cast<size_t>(longest), -1);
    DK_RETURN_IF_ERROR(AllGatherHost(group, asked.data(), lists.data(), longest,
                                     DataType::kInt64));
  }
  // 2. The newest commit whose every shard some member holds (one commit
  // is one layout: never two group sizes for one number).
  std::vector<Holding> holdings;
  for (int r = 0; r < n; ++r) {
    const int64_t* c = &cards[static_cast<size_t>(kCardFields) * r];
    for (int s = 0; s < c[0]; ++s) {
      const int64_t* slot = &c[1 + s * kSlotFields];
      for (int h = 0; h < slot[3]; ++h) {
        holdings.push_back({r, slot[0], slot[1],
                            static_cast<int>(slot[4 + 2 * h]),
                            slot[5 + 2 * h]});
      }
    }
  }
  if (holdings.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sharded snapshot fetch on group '", group.name(),
        "': no member holds a committed snapshot (commit before the first "
        "step)"));
  }
  std::set<int64_t, std::greater<int64_t>> numbers;
  for (const Holding& h : holdings) numbers.insert(h.commit);
  int64_t chosen = 0;
  int world = 0;
  std::vector<const Holding*> holder;  // by shard index: the first member
  for (int64_t number : numbers) {
    std::set<int64_t> worlds;
    for (const Holding& h : holdings) {
      if (h.commit == number) worlds.insert(h.world);
    }
    if (worlds.size() != 1) {
      return absl::InternalError(
          absl::StrCat("sharded snapshot fetch on group '", group.name(),
                       "': commit ", number, " is held in layouts of ",
                       absl::StrJoin(worlds, " and "), " ranks"));
    }
    const int w = static_cast<int>(*worlds.begin());
    std::vector<const Holding*> found(w, nullptr);
    for (const Holding& h : holdings) {
      if (h.commit == number && h.index >= 0 && h.index < w &&
          (found[h.index] == nullptr || h.member < found[h.index]->member)) {
        found[h.index] = &h;
      }
    }
    if (std::all_of(found.begin(), found.end(),
                    [](const Holding* h) { return h != nullptr; })) {
      chosen = number;
      world = w;
      holder = std::move(found);
      break;
    }
  }
  if (chosen == 0) {
    const int64_t newest = *numbers.begin();
    int w = 0;
    std::set<int> held;
    for (const Holding& h : holdings) {
      if (h.commit != newest) continue;
      w = static_cast<int>(h.world);
      held.insert(h.index);
    }
    std::vector<int> lost, holders;
    for (int j = 0; j < w; ++j) {
      if (held.count(j) != 0) continue;
      lost.push_back(j);
      holders.push_back(j);
      holders.push_back((j + w - 1) % w);
    }
    return absl::DataLossError(absl::StrCat(
        "sharded snapshot fetch on group '", group.name(), "': shard(s) ",
        RankList(lost), " of commit ", newest,
        " are lost: the ranks of its group of ", w, " that held them (",
        RankList(holders),
        ") all failed, and no older commit is whole on the members"));
  }
  // 3. Who wants what (the same plan on every member).
  std::vector<std::vector<int>> wants(n);
  for (int q = 0; q < n; ++q) {
    const int64_t* c = &cards[static_cast<size_t>(kCardFields) * q];
    std::set<int> indices;
    if (c[kCardFields - 2] != 0) {
      for (int j = 0; j < world; ++j) indices.insert(j);
    }
    for (int64_t i = 0; i < c[kCardFields - 1]; ++i) {
      const int64_t j = lists[static_cast<size_t>(longest) * q + i];
      if (j < 0 || j >= world) {
        return absl::InvalidArgumentError(
            absl::StrCat("sharded snapshot fetch on group '", group.name(),
                         "': rank ", q, " asked for shard ", j, " of commit ",
                         chosen, ", whose group had ", world, " ranks"));
      }
      indices.insert(static_cast<int>(j));
    }
    wants[q].assign(indices.begin(), indices.end());
  }
  auto holds = [&](int member, int index) {
    for (const Holding& h : holdings) {
      if (h.member == member && h.commit == chosen && h.index == index) {
        return true;
      }
    }
    return false;
  };
  const CommitCopy* mine = FindLocked(chosen);
  // 4. One all_to_all: to each member, in shard order, the shards it wants
  // that this member is the holder of and it lacks.
  std::vector<int64_t> send(n, 0), receive(n, 0);
  std::vector<const Blob*> outgoing;
  int64_t traffic = 0;
  for (int q = 0; q < n; ++q) {
    for (int j : wants[q]) {
      const Holding* h = holder[j];
      if (holds(q, j)) continue;
      traffic += h->bytes;
      if (h->member == me) {
        send[q] += h->bytes;
        outgoing.push_back(&mine->shards.at(j));
      }
      if (q == me) receive[h->member] += h->bytes;
    }
  }
  int64_t sent = 0, received_bytes = 0;
  for (int r = 0; r < n; ++r) {
    sent += send[r];
    received_bytes += receive[r];
  }
  if (traffic > 0) {
    // `traffic` is the same on every member: all of them agree here.
    absl::StatusOr<HostBuffer> out = AllocateHost(sent, "sharded snapshot");
    absl::StatusOr<HostBuffer> in =
        out.ok() ? AllocateHost(received_bytes, "sharded snapshot")
                 : out.status();
    DK_RETURN_IF_ERROR(
        AgreeReady(group, in.status(), "sharded snapshot fetch"));
    int64_t at = 0;
    for (const Blob* b : outgoing) {
      std::memcpy(out->get() + at, b->data.get(), b->bytes);
      at += b->bytes;
    }
    DK_RETURN_IF_ERROR(
        AllToAllHost(group, out->get(), in->get(), send, receive));
    // Each sender's shards arrive in shard order, senders in rank order.
    std::shared_ptr<char[]> arrived(*std::move(in));
    std::vector<int64_t> offset(n, 0);
    for (int r = 1; r < n; ++r) offset[r] = offset[r - 1] + receive[r - 1];
    for (int j : wants[me]) {
      if (holds(me, j)) continue;
      const Holding* h = holder[j];
      Blob blob;
      blob.data =
          std::shared_ptr<char[]>(arrived, arrived.get() + offset[h->member]);
      blob.bytes = h->bytes;
      offset[h->member] += h->bytes;
      fetched_[j] = std::move(blob);
    }
    fetched_bytes_ = received_bytes;
  }
  for (int j : wants[me]) {
    if (holds(me, j)) fetched_[j] = mine->shards.at(j);
  }
  // The chosen commit is whole on the members: where this rank holds it as
  // pending, it is the one in force from now on, so a commit of the same
  // layout after this one keeps it until that commit completes. The one it
  // replaces stays as pending (another loss may fail this fetch elsewhere,
  // and a fetch again may need it) until that commit overwrites it.
  if (pending_ && pending_->number == chosen) std::swap(in_force_, pending_);
  return Fetched{chosen, world};
}

absl::StatusOr<absl::Span<const char>> ShardedSnapshot::Shard(
    int index, int buffer) const {
  absl::MutexLock lock(&mu_);
  auto it = fetched_.find(index);
  if (it == fetched_.end()) {
    return absl::NotFoundError(
        absl::StrCat("sharded snapshot: shard ", index,
                     " was not fetched (Fetch asks for the shards to read)"));
  }
  const char* data = it->second.data.get();
  int64_t count = 0;
  std::memcpy(&count, data, 8);
  if (buffer < 0 || buffer >= count) {
    return absl::OutOfRangeError(
        absl::StrCat("sharded snapshot: shard ", index, " has ", count,
                     " buffer(s); buffer ", buffer, " is past them"));
  }
  int64_t at = HeaderBytes(count), bytes = 0;
  for (int i = 0; i <= buffer; ++i) {
    std::memcpy(&bytes, data + 8 * (1 + i), 8);
    if (i < buffer) at += Aligned(bytes);
  }
  return absl::Span<const char>(data + at, static_cast<size_t>(bytes));
}

int64_t ShardedSnapshot::commit_number() const {
  absl::MutexLock lock(&mu_);
  return in_force_ ? in_force_->number : 0;
}

int64_t ShardedSnapshot::bytes() const {
  absl::MutexLock lock(&mu_);
  int64_t total = fetched_bytes_;
  for (const std::optional<CommitCopy>* c : {&in_force_, &pending_}) {
    if (!c->has_value()) continue;
    for (const auto& [index, blob] : (*c)->shards) total += blob.bytes;
  }
  return total;
}

}  // namespace elastic
}  // namespace distkit
