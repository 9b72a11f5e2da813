#include "cc/comm/shm/slot_copy.h"

#include <algorithm>
#include <cstring>

#include "cc/comm/shm/shm_thresholds.h"
#include "cc/core/status.h"

namespace distkit {

absl::Status BroadcastBySlots(ShmSteps& steps, const OpContext& ctx,
                              TensorRef data, int root, bool oversubscribed) {
  const int rank = steps.rank();
  const size_t slot_bytes = steps.layout().slot_bytes();
  char* base = static_cast<char*>(data.data());
  // The readers copy chunk k while the root writes chunk k + 1, so what is
  // not overlapped is the root's first chunk and the readers' last. With a
  // core per rank, chunks start small and double up to a slot: the readers
  // start after a short copy instead of a whole slot's, for a few more steps.
  // With more ranks than cores a step costs a context switch, and whole
  // slots are faster.
  size_t chunk =
      oversubscribed ? slot_bytes : std::min(slot_bytes, kFirstBroadcastChunk);
  for (size_t at = 0, n = 0; at < data.nbytes(); at += n) {
    n = std::min(chunk, data.nbytes() - at);
    if (rank == root) std::memcpy(steps.slot(rank, n), base + at, n);
    DK_RETURN_IF_ERROR(steps.Step(ctx));
    if (rank != root) std::memcpy(base + at, steps.slot(root, n), n);
    steps.FlipTurn();
    chunk = std::min(slot_bytes, 2 * chunk);
  }
  return absl::OkStatus();
}

absl::Status AllGatherBySlots(ShmSteps& steps, const OpContext& ctx,
                              TensorRef input, TensorRef output) {
  const size_t slot_bytes = steps.layout().slot_bytes();
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  const size_t part = input.nbytes();
  for (size_t at = 0; at < part; at += slot_bytes) {
    const size_t n = std::min(slot_bytes, part - at);
    std::memcpy(steps.slot(steps.rank(), n), in + at, n);
    DK_RETURN_IF_ERROR(steps.Step(ctx));
    for (int r = 0; r < steps.size(); ++r)
      std::memcpy(out + r * part + at, steps.slot(r, n), n);
    steps.FlipTurn();
  }
  return absl::OkStatus();
}

}  // namespace distkit
