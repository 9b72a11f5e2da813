#include "cc/comm/shm/slot_reduce.h"

#include <algorithm>
#include <cstring>

#include "cc/comm/shm/rank_slice.h"
#include "cc/core/data_type.h"
#include "cc/core/status.h"

namespace distkit {

// Every chunk of every operation writes the slots of this turn, reads them
// after one or two steps, then flips the turn. A slot is written again only
// two chunks later, after every rank has arrived at a step that follows its
// last read.

absl::Status ReduceInOneStep(ShmSteps& steps, const OpContext& ctx,
                             TensorRef data, ReduceFn fn, int root) {
  // The data is a few cache lines; a second step would cost more than the
  // extra reads.
  const size_t elem = ElementSize(data.dtype());
  const size_t bytes = data.nbytes();
  char* mine = static_cast<char*>(data.data());
  std::memcpy(steps.slot(steps.rank(), bytes), mine, bytes);
  DK_RETURN_IF_ERROR(steps.Step(ctx));
  if (root < 0 || steps.rank() == root) {
    FoldSlots(steps.layout(), fn, 0, bytes, bytes, elem, mine, steps.turn());
  }
  steps.FlipTurn();
  return absl::OkStatus();
}

// Per slot-sized chunk: every rank copies the chunk in; after a step each
// rank folds its 1/size slice of it from every slot (all ranks in parallel)
// and publishes the result in its own slot; after a second step every rank
// (or only the root) copies the others' reduced slices out. Per rank that is
// one copy in, 1/size of the folding and one copy out, instead of folding
// the whole chunk size - 1 times.
absl::Status ReduceBySlices(ShmSteps& steps, const OpContext& ctx,
                            TensorRef data, ReduceFn fn, int root,
                            std::vector<char>* scratch) {
  const int rank = steps.rank();
  const int size = steps.size();
  const size_t elem = ElementSize(data.dtype());
  const int64_t chunk_elems = steps.layout().slot_bytes() / elem;
  char* base = static_cast<char*>(data.data());
  const bool receives = root < 0 || root == rank;
  for (int64_t at = 0; at < data.numel(); at += chunk_elems) {
    const int64_t n = std::min<int64_t>(chunk_elems, data.numel() - at);
    const size_t bytes = n * elem;
    char* mine = base + at * elem;
    char* own = steps.slot(rank, bytes);
    std::memcpy(own, mine, bytes);
    DK_RETURN_IF_ERROR(steps.Step(ctx));
    const size_t lo = SliceBegin(n, rank, size) * elem;
    const size_t len = SliceBegin(n, rank + 1, size) * elem - lo;
    if (len > 0) {
      // Folded into this rank's own buffer when it keeps the result, else
      // into scratch; the own slot is one of the inputs until it is done.
      char* out = mine + lo;
      if (!receives) {
        if (scratch->size() < len) scratch->resize(len);
        out = scratch->data();
      }
      FoldSlots(steps.layout(), fn, lo, len, bytes, elem, out, steps.turn());
      if (root < 0 || rank != root) std::memcpy(own + lo, out, len);
    }
    DK_RETURN_IF_ERROR(steps.Step(ctx));
    if (receives) {
      for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        const size_t r_lo = SliceBegin(n, r, size) * elem;
        const size_t r_len = SliceBegin(n, r + 1, size) * elem - r_lo;
        std::memcpy(mine + r_lo, steps.slot(r, bytes) + r_lo, r_len);
      }
    }
    steps.FlipTurn();
  }
  return absl::OkStatus();
}

}  // namespace distkit
