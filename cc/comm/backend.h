// File: backend.h
//
// Backend is the interface every communication engine implements (Gloo now;
// NCCL and MPI in cc/comm/<name>/). Its operations are blocking and run one at
// a time, in the same order on every rank: ProcessGroup (cc/dist) owns the
// ordering, the asynchronous Work handles, sequence numbers and argument
// checks, and calls a Backend from one thread.
//
// Buffer conventions (element counts, not bytes; all buffers dense):
// - AllReduce / Broadcast / Reduce work in place on `data`.
// - AllGather: `output` holds size() * input.numel() elements, rank order.
// - Gather: `output` is used on `root` only (size() * input.numel()).
// - Scatter: `input` is used on `root` only (size() * output.numel()).
// - ReduceScatter: `input` holds size() * output.numel() elements.
// - AllToAll: `input_splits[r]` elements go to rank r, `output_splits[r]`
//   come from rank r; empty splits mean equal parts.
// A backend checks that every rank called the same operation with matching
// sizes before any data moves, and fails on every rank (INVALID_ARGUMENT)
// when they differ.

#ifndef DISTKIT_CC_COMM_BACKEND_H_
#define DISTKIT_CC_COMM_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cc/core/reduce_op.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// Identifies one operation, for messages and for agreement across ranks.
struct OpContext {
  uint64_t seq = 0;        // per-group sequence number, same on every rank
  std::string op_name;     // "all_reduce"
  std::string group_name;  // "world", "group1"
  absl::Duration timeout = absl::Minutes(30);

  // "all_reduce #12 on group 'world'".
  std::string Describe() const;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual absl::Status AllReduce(const OpContext& ctx, TensorRef data,
                                 ReduceOp op) = 0;
  virtual absl::Status Broadcast(const OpContext& ctx, TensorRef data,
                                 int root) = 0;
  virtual absl::Status Reduce(const OpContext& ctx, TensorRef data, ReduceOp op,
                              int root) = 0;
  virtual absl::Status AllGather(const OpContext& ctx, TensorRef input,
                                 TensorRef output) = 0;
  virtual absl::Status Gather(const OpContext& ctx, TensorRef input,
                              TensorRef output, int root) = 0;
  virtual absl::Status Scatter(const OpContext& ctx, TensorRef input,
                               TensorRef output, int root) = 0;
  virtual absl::Status ReduceScatter(const OpContext& ctx, TensorRef input,
                                     TensorRef output, ReduceOp op) = 0;
  virtual absl::Status AllToAll(const OpContext& ctx, TensorRef input,
                                absl::Span<const int64_t> input_splits,
                                TensorRef output,
                                absl::Span<const int64_t> output_splits) = 0;
  virtual absl::Status Barrier(const OpContext& ctx) = 0;

  // Point to point; `tag` tells apart messages between the same pair. The
  // receiver's buffer must match the sender's size and dtype (checked).
  virtual absl::Status Send(const OpContext& ctx, TensorRef data, int dst,
                            int tag) = 0;
  virtual absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                            int tag) = 0;

  // Stops the backend: the operation in progress (if any) fails soon, and so
  // does every later one. Callable from any thread.
  virtual void Abort() = 0;

  // Where this backend wants tensors (mmengine's get_comm_device), and
  // whether it takes a tensor on `device` at all.
  virtual Device comm_device() const { return Device::Cpu(); }
  virtual absl::Status CheckDevice(Device device) const;

  // Backends whose subgroups derive from the parent's connection (MPI's
  // MPI_Comm_split, NCCL's ncclCommSplit) override both: Split is collective
  // over this backend's ranks; members (`parent_ranks`, in the new group's
  // order) get a backend, the others nullptr.
  virtual bool splits_from_parent() const { return false; }
  virtual absl::StatusOr<std::unique_ptr<Backend>> Split(
      const OpContext& ctx, const std::vector<int>& parent_ranks);
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_BACKEND_H_
