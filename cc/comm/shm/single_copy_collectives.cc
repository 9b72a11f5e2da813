#include "cc/comm/shm/single_copy_collectives.h"

#include <algorithm>
#include <cstring>

#include "absl/base/macros.h"
#include "cc/comm/shm/rank_slice.h"
#include "cc/comm/shm/shm_thresholds.h"
#include "cc/core/data_type.h"
#include "cc/core/status.h"

namespace distkit {

// all_reduce by slices of the whole buffer: each rank reads its slice of
// every peer's buffer (one copy each), folds it into its own buffer and
// writes the result into the same slice of every peer's. Only a slice's
// owner touches that slice of any buffer, so nobody waits between the read
// and the write; a last step keeps every buffer in place until all writes
// are done. Writing instead of reading the others' results saves a step,
// and the written piece is still in the writer's cache.
absl::Status AllReduceBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                   TensorRef data, ReduceFn fn) {
  ShmSteps& steps = path.steps();
  const int rank = steps.rank();
  const size_t elem = ElementSize(data.dtype());
  char* mine = static_cast<char*>(data.data());
  DK_RETURN_IF_ERROR(path.PublishForSingleCopy(ctx, OpCode::kAllReduce, mine));
  const size_t lo = SliceBegin(data.numel(), rank, steps.size()) * elem;
  const size_t hi = SliceBegin(data.numel(), rank + 1, steps.size()) * elem;
  absl::Status folded = path.FoldPeers(ctx, fn, lo, hi - lo, elem, mine + lo,
                                       mine + lo, /*write_back=*/true);
  if (!folded.ok()) return path.Fail(folded);
  return steps.Step(ctx);
}

absl::Status ReduceBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                TensorRef data, ReduceFn fn, int root) {
  ShmSteps& steps = path.steps();
  char* mine = static_cast<char*>(data.data());
  DK_RETURN_IF_ERROR(path.PublishForSingleCopy(ctx, OpCode::kReduce, mine));
  if (steps.rank() == root) {
    absl::Status folded =
        path.FoldPeers(ctx, fn, 0, data.nbytes(), ElementSize(data.dtype()),
                       mine, mine, /*write_back=*/false);
    if (!folded.ok()) return path.Fail(folded);
  }
  // Every buffer stays in place until the root has read it.
  return steps.Step(ctx);
}

absl::Status BroadcastBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                   TensorRef data, int root) {
  ShmSteps& steps = path.steps();
  const int rank = steps.rank();
  const int size = steps.size();
  char* base = static_cast<char*>(data.data());
  // The copying is shared: the root writes the first 1/size of its buffer
  // into every reader's, while each reader reads the rest of the root's.
  // Both then move (size - 1)/size of the buffer, where the root alone
  // idled and the readers moved all of it.
  DK_RETURN_IF_ERROR(path.PublishForSingleCopy(ctx, OpCode::kBroadcast, base));
  const size_t pushed =
      SliceBegin(data.numel(), 1, size) * ElementSize(data.dtype());
  if (rank == root) {
    for (int i = 1; i < size; ++i) {
      absl::Status write =
          path.WritePeer(ctx, (root + i) % size, 0, base, pushed);
      if (!write.ok()) return path.Fail(write);
    }
  } else {
    absl::Status read =
        path.ReadPeer(ctx, root, pushed, base + pushed, data.nbytes() - pushed);
    if (!read.ok()) return path.Fail(read);
  }
  return steps.Step(ctx);
}

absl::Status AllGatherBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                   TensorRef input, TensorRef output) {
  ShmSteps& steps = path.steps();
  const int rank = steps.rank();
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  const size_t part = input.nbytes();
  // Each rank writes its part into every peer's output, piece by piece,
  // so that each piece of the input is read from memory once for its own
  // part and every peer's (a written piece also stays in the writer's
  // cache until its reader touches it).
  char* own = out + rank * part;
  // The peers write into the rest of the output: CollectiveContract::
  // AllGather stages an input that lies there, on every rank alike.
  ABSL_ASSERT(in == own || !input.Overlaps(output));
  DK_RETURN_IF_ERROR(path.PublishForSingleCopy(ctx, OpCode::kAllGather, out));
  for (size_t at = 0; at < part; at += kFoldPieceBytes) {
    const size_t len = std::min(kFoldPieceBytes, part - at);
    if (own != in) std::memcpy(own + at, in + at, len);
    for (int i = 1; i < steps.size(); ++i) {
      const int r = (rank + i) % steps.size();  // spread the writers
      absl::Status written =
          path.WritePeer(ctx, r, rank * part + at, in + at, len);
      if (!written.ok()) return path.Fail(written);
    }
  }
  return steps.Step(ctx);
}

absl::Status GatherBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                TensorRef input, TensorRef output, int root) {
  ShmSteps& steps = path.steps();
  const int rank = steps.rank();
  const size_t part = input.nbytes();
  // Each rank writes its part into the root's output. The root copies its
  // own first: its input may lie in the output, where the others write.
  char* out = static_cast<char*>(output.data());
  if (rank == root) std::memmove(out + root * part, input.data(), part);
  DK_RETURN_IF_ERROR(path.PublishForSingleCopy(ctx, OpCode::kGather, out));
  if (rank != root) {
    absl::Status written =
        path.WritePeer(ctx, root, rank * part, input.data(), part);
    if (!written.ok()) return path.Fail(written);
  }
  return steps.Step(ctx);
}

absl::Status ScatterBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                 TensorRef input, TensorRef output, int root) {
  ShmSteps& steps = path.steps();
  const int rank = steps.rank();
  const size_t part = output.nbytes();
  // Each rank reads its part from the root's input. The root copies its
  // own last when its output lies in the input, which the others read.
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  const bool inside = rank == root && output.Overlaps(input);
  if (rank == root && !inside) std::memcpy(out, in + root * part, part);
  DK_RETURN_IF_ERROR(path.PublishForSingleCopy(ctx, OpCode::kScatter, in));
  if (rank != root) {
    absl::Status read = path.ReadPeer(ctx, root, rank * part, out, part);
    if (!read.ok()) return path.Fail(read);
  }
  DK_RETURN_IF_ERROR(steps.Step(ctx));
  if (inside) std::memmove(out, in + root * part, part);
  return absl::OkStatus();
}

absl::Status AllToAllBySingleCopy(SingleCopyPath& path, const OpContext& ctx,
                                  TensorRef input, TensorRef output) {
  ShmSteps& steps = path.steps();
  const int rank = steps.rank();
  const size_t part = output.nbytes() / steps.size();
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  // The peers read the input while this rank writes its output:
  // CollectiveContract::AllToAll stages an output that overlaps it, on
  // every rank alike.
  ABSL_ASSERT(!output.Overlaps(input));
  DK_RETURN_IF_ERROR(path.PublishForSingleCopy(ctx, OpCode::kAllToAll, in));
  std::memcpy(out + rank * part, in + rank * part, part);
  for (int i = 1; i < steps.size(); ++i) {
    const int r = (rank + i) % steps.size();  // spread the readers
    absl::Status read =
        path.ReadPeer(ctx, r, rank * part, out + r * part, part);
    if (!read.ok()) return path.Fail(read);
  }
  // Every input stays in place until every rank has read its part.
  return steps.Step(ctx);
}

absl::Status ReduceScatterBySingleCopy(SingleCopyPath& path,
                                       const OpContext& ctx, TensorRef input,
                                       TensorRef output, ReduceFn fn) {
  ShmSteps& steps = path.steps();
  const int rank = steps.rank();
  const size_t part = output.nbytes();
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  // An output inside the input would be written while the peers read the
  // input: CollectiveContract::ReduceScatter stages it, on every rank alike.
  ABSL_ASSERT(!output.Overlaps(input));
  DK_RETURN_IF_ERROR(
      path.PublishForSingleCopy(ctx, OpCode::kReduceScatter, in));
  absl::Status folded =
      path.FoldPeers(ctx, fn, rank * part, part, ElementSize(output.dtype()),
                     in + rank * part, out);
  if (!folded.ok()) return path.Fail(folded);
  return steps.Step(ctx);
}

}  // namespace distkit
