// Operations where each rank sends a piece to each rank (gather, scatter,
// reduce_scatter, all_to_all, equal or uneven), through the slots of the
// step protocol (ShmSteps): each slot is cut into one region per
// destination, and a round moves a window of every pair's piece.

#ifndef DISTKIT_CC_COMM_SHM_SLOT_EXCHANGE_H_
#define DISTKIT_CC_COMM_SHM_SLOT_EXCHANGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cc/comm/op_context.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/comm/shm/shm_steps.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// What one rank sends each rank and receives from each rank in an
// Exchange, as byte ranges of its buffers (empty: none at all).
struct ExchangePieces {
  size_t most = 0;  // the largest piece any pair moves (same on all ranks)
  size_t elem = 1;
  const char* send = nullptr;
  std::vector<size_t> send_off, send_len;  // by destination
  char* recv = nullptr;
  std::vector<size_t> recv_off, recv_len;  // by source
  // Set: every source's piece is folded (in rank order) into recv at
  // offset 0, the same length from every source (reduce_scatter).
  ReduceFn fn = nullptr;
};

// Moves every pair's piece through per-destination regions of the slots,
// in rounds.
absl::Status Exchange(ShmSteps& steps, const OpContext& ctx,
                      const ExchangePieces& pieces);

// The largest of every rank's `mine` (one small step).
absl::StatusOr<size_t> MaxOverRanks(ShmSteps& steps, const OpContext& ctx,
                                    size_t mine);

// The collectives as exchanges (buffer conventions: cc/comm/backend.h).
absl::Status GatherBySlots(ShmSteps& steps, const OpContext& ctx,
                           TensorRef input, TensorRef output, int root);
absl::Status ScatterBySlots(ShmSteps& steps, const OpContext& ctx,
                            TensorRef input, TensorRef output, int root);
absl::Status ReduceScatterBySlots(ShmSteps& steps, const OpContext& ctx,
                                  TensorRef input, TensorRef output,
                                  ReduceFn fn);
absl::Status AllToAllBySlots(ShmSteps& steps, const OpContext& ctx,
                             TensorRef input,
                             absl::Span<const int64_t> input_splits,
                             TensorRef output,
                             absl::Span<const int64_t> output_splits);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SLOT_EXCHANGE_H_
