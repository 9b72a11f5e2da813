#include "cc/comm/shm/eager_exchange.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/comm/shm/shm_segment.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

bool SameCall(const OpSignature& a, const OpSignature& b) {
  return std::memcmp(&a, &b, sizeof(OpSignature)) == 0;
}

bool SendsAlone(OpCode op, int rank, int root) {
  const bool is_root = rank == root;
  return op == OpCode::kBroadcast || op == OpCode::kScatter ? is_root
                                                            : !is_root;
}

const ShmRankHeader::Turn& Entry(const ShmLayout& layout, int r,
                                 uint64_t step) {
  return *layout.eager(r, step);
}

// The error where calls differ in a way a sender may not have seen: the
// group cannot go on (a sender may have returned already), so the status
// poisons it (ABORTED), and with `mark_failed` the group is marked failed
// too, so that no rank waits for this one (not where every rank sees the
// same and fails alike: a peer still in its wait would name this rank
// instead). `heard[r]`: what rank r called, for each r in `ranks`;
// `earlier`: the calls of this operation agree, the chains (earlier eager
// operations) do not.
absl::Status CallsDiffer(ShmSteps& steps, const OpContext& ctx,
                         absl::Span<const OpSignature> heard,
                         const std::vector<int>& ranks, bool earlier,
                         bool mark_failed) {
  std::string what;
  if (earlier) {
    what = absl::StrCat(
        "the ranks' earlier small rooted operations (broadcast, scatter, "
        "gather or reduce of at most ",
        kSmallSlotBytes,
        " bytes, whose senders do not wait for the receivers' check) were "
        "not the same calls on every rank");
  } else {
    // Each distinct call with the ranks that made it, as CheckAgreement
    // says it.
    std::vector<std::pair<std::string, std::vector<std::string>>> calls;
    for (int r : ranks) {
      const std::string d = heard[r].Describe();
      auto it = calls.begin();
      while (it != calls.end() && it->first != d) ++it;
      if (it == calls.end()) it = calls.insert(calls.end(), {d, {}});
      it->second.push_back(steps.names().Rank(r));
    }
    what = "ranks disagree:";
    for (size_t i = 0; i < calls.size(); ++i) {
      absl::StrAppend(&what, i == 0 ? " " : "; ",
                      absl::StrJoin(calls[i].second, ", "), " called ",
                      calls[i].first);
    }
  }
  absl::Status error = absl::AbortedError(absl::StrCat(
      ctx.Describe(), " (", steps.names().Here(steps.rank()), "): ", what,
      " (every rank must make the same collective calls in the same order, "
      "with the same sizes and dtypes). A sender of a small rooted "
      "operation may have returned before this was seen, so the group "
      "cannot go on: abort it and create a new group"));
  return mark_failed ? steps.FailGroup(std::move(error)) : error;
}

}  // namespace

bool TakesEagerStep(OpCode op, size_t bytes) {
  if (bytes == 0 || bytes > kSmallSlotBytes) return false;
  switch (op) {
    case OpCode::kBroadcast:
    case OpCode::kScatter:
    case OpCode::kGather:
    case OpCode::kReduce:
      return true;
    default:
      return false;
  }
}

uint64_t ChainWith(uint64_t chain, const OpSignature& sig) {
  // The signature's five words, each multiplied in (a few cycles: this is
  // on every eager operation's path), then splitmix64's finalizer.
  static_assert(sizeof(OpSignature) % sizeof(uint64_t) == 0);
  uint64_t words[sizeof(OpSignature) / sizeof(uint64_t)];
  std::memcpy(words, &sig, sizeof(sig));
  uint64_t h = chain;
  for (uint64_t w : words) {
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 32;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

absl::Status EagerExchange(ShmSteps& steps, const OpContext& ctx,
                           const OpSignature& mine, InlinePayload payload,
                           uint64_t* chain, uint64_t* step) {
  const ShmLayout& layout = steps.layout();
  const int rank = steps.rank(), size = steps.size();
  const uint64_t s = steps.step() + 1;
  const OpCode op = static_cast<OpCode>(mine.op);
  const bool sends_alone = SendsAlone(op, rank, mine.root);
  // A sender may not wait at all: it looks for an abort or a failed group
  // first. (A receiver's wait does; what it waits for may be there even
  // so, from a sender that published before the group failed.)
  if (sends_alone) DK_RETURN_IF_ERROR(steps.Ended(ctx));
  // The entry of step s held step s - kEagerDepth's, which every rank has
  // read once it published the step after that one.
  if (s > kEagerDepth) {
    DK_RETURN_IF_ERROR(steps.AwaitAll(ctx, s - kEagerDepth + 1));
  }
  *chain = ChainWith(*chain, mine);
  ShmRankHeader::Turn& entry = *layout.eager(rank, s);
  entry.sig = mine;
  entry.chain = *chain;
  if (payload.data != nullptr) {
    std::memcpy(entry.small, payload.data, payload.bytes);
  }
  // Release: the entry's contents come with its step, which is what a
  // receiver polls.
  entry.step.store(s, std::memory_order_release);
  *step = steps.PublishAlone();
  if (sends_alone) return absl::OkStatus();
  // A receiver: the root's entry (broadcast, scatter) or every other
  // rank's (gather, reduce), each compared with this rank's own call. No
  // allocation unless calls differ: this is every small call's path.
  const bool from_root = op == OpCode::kBroadcast || op == OpCode::kScatter;
  std::vector<OpSignature> heard;  // filled where calls differ
  bool calls_differ = false, chains_differ = false;
  for (int r = from_root ? mine.root : 0;
       r < (from_root ? mine.root + 1 : size); ++r) {
    if (r == rank) continue;
    bool other_way = false;
    DK_RETURN_IF_ERROR(steps.AwaitEntry(ctx, s, r, &other_way));
    if (other_way) {
      // r took this step as a synchronized one, in the turn every rank is
      // at (the turns flip at synchronized steps alone).
      if (heard.empty()) heard.resize(size, mine);
      heard[r] = layout.header(r)->turns[steps.turn()].sig;
      calls_differ = true;
      continue;
    }
    const ShmRankHeader::Turn& theirs = Entry(layout, r, s);
    if (!SameCall(theirs.sig, mine) || theirs.chain != *chain) {
      if (heard.empty()) heard.resize(size, mine);
      heard[r] = theirs.sig;
      calls_differ |= !SameCall(theirs.sig, mine);
      chains_differ |= theirs.chain != *chain;
    }
  }
  if (!calls_differ && !chains_differ) return absl::OkStatus();
  std::vector<int> ranks = {rank};
  for (int r = 0; r < size; ++r) {
    if (r != rank && (!from_root || r == mine.root)) ranks.push_back(r);
  }
  // The senders have gone on: they must not wait for this rank.
  return CallsDiffer(steps, ctx, heard, ranks, !calls_differ,
                     /*mark_failed=*/true);
}

absl::Status CheckChains(ShmSteps& steps, const OpContext& ctx, uint64_t chain,
                         uint64_t step, absl::Span<OpSignature> all) {
  const ShmLayout& layout = steps.layout();
  const int turn = steps.turn();
  bool eager_taken = false, chains_differ = false;
  for (int r = 0; r < steps.size(); ++r) {
    const ShmRankHeader::Turn& t = layout.header(r)->turns[turn];
    if (t.step.load(std::memory_order_relaxed) != step &&
        Entry(layout, r, step).step.load(std::memory_order_relaxed) == step) {
      // r took this step as an eager one (its count says it published the
      // step, Step waited for it, and its entry of the step is written):
      // its call is in its entry.
      all[r] = Entry(layout, r, step).sig;
      eager_taken = true;
      continue;
    }
    all[r] = t.sig;
    chains_differ |= t.chain != chain;
  }
  if (!eager_taken && !chains_differ) return absl::OkStatus();
  std::vector<int> ranks;
  for (int r = 0; r < steps.size(); ++r) ranks.push_back(r);
  // Where every rank took this step synchronized, every rank sees the
  // same chains and fails alike; a rank that took it eagerly has gone on
  // and must not wait for the others.
  return CallsDiffer(steps, ctx, all, ranks, !eager_taken,
                     /*mark_failed=*/eager_taken);
}

}  // namespace distkit
