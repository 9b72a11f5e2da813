#include "cc/comm/shm/slot_exchange.h"

#include <algorithm>
#include <cstring>

#include "cc/comm/shm/shm_segment.h"
#include "cc/comm/shm/slot_reduce.h"
#include "cc/core/data_type.h"
#include "cc/core/status.h"

namespace distkit {

absl::Status Exchange(ShmSteps& steps, const OpContext& ctx,
                      const ExchangePieces& p) {
  const int rank = steps.rank();
  const int size = steps.size();
  // Each slot is cut into one region per destination; a round moves up to
  // `window` bytes of every pair's piece. The window is the same on every
  // rank (it depends only on p.most and the group).
  size_t window = steps.layout().slot_bytes() / size;
  window = window / 64 * 64;  // >= 64: size <= ShmBackend::kMaxRanks
  if (p.most * size <= kSmallSlotBytes) window = p.most;
  if (window == 0) return absl::OkStatus();  // nothing to move anywhere
  const size_t slot_bytes = window * size;
  for (size_t at = 0; at < p.most; at += window) {
    char* own = steps.slot(rank, slot_bytes);
    for (int d = 0; d < size && !p.send_len.empty(); ++d) {
      if (at < p.send_len[d]) {
        std::memcpy(own + d * window, p.send + p.send_off[d] + at,
                    std::min(window, p.send_len[d] - at));
      }
    }
    DK_RETURN_IF_ERROR(steps.Step(ctx));
    const size_t region = rank * window;
    if (p.fn != nullptr) {
      if (at < p.recv_len[0]) {
        FoldSlots(steps.layout(), p.fn, region,
                  std::min(window, p.recv_len[0] - at), slot_bytes, p.elem,
                  p.recv + at, steps.turn());
      }
    } else {
      for (int s = 0; s < size && !p.recv_len.empty(); ++s) {
        if (at < p.recv_len[s]) {
          std::memcpy(p.recv + p.recv_off[s] + at,
                      steps.slot(s, slot_bytes) + region,
                      std::min(window, p.recv_len[s] - at));
        }
      }
    }
    steps.FlipTurn();
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> MaxOverRanks(ShmSteps& steps, const OpContext& ctx,
                                    size_t mine) {
  const uint64_t v = mine;
  std::memcpy(steps.slot(steps.rank(), sizeof(v)), &v, sizeof(v));
  DK_RETURN_IF_ERROR(steps.Step(ctx));
  uint64_t most = 0;
  for (int r = 0; r < steps.size(); ++r) {
    uint64_t theirs;
    std::memcpy(&theirs, steps.slot(r, sizeof(v)), sizeof(v));
    most = std::max(most, theirs);
  }
  steps.FlipTurn();
  return static_cast<size_t>(most);
}

namespace {

// A rooted op's pieces on one side: `part` bytes with the root alone (a
// gather's sends, a scatter's receives) ...
void OnlyWithRoot(int size, int root, size_t part, std::vector<size_t>& off,
                  std::vector<size_t>& len) {
  off.assign(size, 0);
  len.assign(size, 0);
  len[root] = part;
}

// ... and the root's: `part` bytes with every rank, in rank order.
void WithEveryRank(int size, size_t part, std::vector<size_t>& off,
                   std::vector<size_t>& len) {
  for (int r = 0; r < size; ++r) off.push_back(r * part);
  len.assign(size, part);
}

}  // namespace

absl::Status GatherBySlots(ShmSteps& steps, const OpContext& ctx,
                           TensorRef input, TensorRef output, int root) {
  const size_t part = input.nbytes();
  ExchangePieces p;
  p.most = part;
  p.elem = ElementSize(input.dtype());
  p.send = static_cast<const char*>(input.data());
  OnlyWithRoot(steps.size(), root, part, p.send_off, p.send_len);
  if (steps.rank() == root) {
    p.recv = static_cast<char*>(output.data());
    WithEveryRank(steps.size(), part, p.recv_off, p.recv_len);
  }
  return Exchange(steps, ctx, p);
}

absl::Status ScatterBySlots(ShmSteps& steps, const OpContext& ctx,
                            TensorRef input, TensorRef output, int root) {
  const size_t part = output.nbytes();
  ExchangePieces p;
  p.most = part;
  p.elem = ElementSize(output.dtype());
  if (steps.rank() == root) {
    p.send = static_cast<const char*>(input.data());
    WithEveryRank(steps.size(), part, p.send_off, p.send_len);
  }
  p.recv = static_cast<char*>(output.data());
  OnlyWithRoot(steps.size(), root, part, p.recv_off, p.recv_len);
  return Exchange(steps, ctx, p);
}

absl::Status ReduceScatterBySlots(ShmSteps& steps, const OpContext& ctx,
                                  TensorRef input, TensorRef output,
                                  ReduceFn fn) {
  const int size = steps.size();
  const size_t part = output.nbytes();
  ExchangePieces p;
  p.most = part;
  p.elem = ElementSize(output.dtype());
  p.fn = fn;
  p.send = static_cast<const char*>(input.data());
  for (int d = 0; d < size; ++d) p.send_off.push_back(d * part);
  p.send_len.assign(size, part);
  p.recv = static_cast<char*>(output.data());
  p.recv_off.assign(size, 0);
  p.recv_len.assign(size, part);
  return Exchange(steps, ctx, p);
}

absl::Status AllToAllBySlots(ShmSteps& steps, const OpContext& ctx,
                             TensorRef input,
                             absl::Span<const int64_t> input_splits,
                             TensorRef output,
                             absl::Span<const int64_t> output_splits) {
  const int size = steps.size();
  const size_t elem = ElementSize(input.dtype());
  ExchangePieces p;
  p.elem = elem;
  p.send = static_cast<const char*>(input.data());
  p.recv = static_cast<char*>(output.data());
  // Empty splits are equal parts of the tensor.
  auto lay_out = [&](absl::Span<const int64_t> splits, size_t total,
                     std::vector<size_t>* off, std::vector<size_t>* len) {
    size_t at = 0;
    for (int r = 0; r < size; ++r) {
      const size_t n = splits.empty() ? total / size : splits[r] * elem;
      off->push_back(at);
      len->push_back(n);
      at += n;
    }
  };
  lay_out(input_splits, input.nbytes(), &p.send_off, &p.send_len);
  lay_out(output_splits, output.nbytes(), &p.recv_off, &p.recv_len);
  if (input_splits.empty() && output_splits.empty()) {
    p.most = input.nbytes() / size;
  } else {
    // The largest piece any pair sends bounds the rounds every rank runs.
    size_t mine = 0;
    for (size_t n : p.send_len) mine = std::max(mine, n);
    DK_ASSIGN_OR_RETURN(p.most, MaxOverRanks(steps, ctx, mine));
  }
  return Exchange(steps, ctx, p);
}

}  // namespace distkit
