// ForwardingBackend: a Backend whose data movement goes to another backend
// unless a subclass moves it itself. The composites build on it: the device
// dispatcher (each operation to the backend of its tensors' device), the
// hierarchical backend (what it does not stage by host, to its whole
// group's backend).
// Everything else of Backend stays the subclass's to answer.

#ifndef DISTKIT_CC_COMM_FORWARDING_BACKEND_H_
#define DISTKIT_CC_COMM_FORWARDING_BACKEND_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cc/comm/backend.h"

namespace distkit {

class ForwardingBackend : public Backend {
 public:
  absl::Status AllReduce(const OpContext& ctx, TensorRef data,
                         ReduceOp op) override {
    return ForwardTo(data)->AllReduce(ctx, data, op);
  }
  absl::Status Broadcast(const OpContext& ctx, TensorRef data,
                         int root) override {
    return ForwardTo(data)->Broadcast(ctx, data, root);
  }
  absl::Status Reduce(const OpContext& ctx, TensorRef data, ReduceOp op,
                      int root) override {
    return ForwardTo(data)->Reduce(ctx, data, op, root);
  }
  absl::Status AllGather(const OpContext& ctx, TensorRef input,
                         TensorRef output) override {
    return ForwardTo(input)->AllGather(ctx, input, output);
  }
  absl::Status Gather(const OpContext& ctx, TensorRef input, TensorRef output,
                      int root) override {
    return ForwardTo(input)->Gather(ctx, input, output, root);
  }
  // Scatter's device is its output's (a non-root has no input).
  absl::Status Scatter(const OpContext& ctx, TensorRef input, TensorRef output,
                       int root) override {
    return ForwardTo(output)->Scatter(ctx, input, output, root);
  }
  absl::Status ReduceScatter(const OpContext& ctx, TensorRef input,
                             TensorRef output, ReduceOp op) override {
    return ForwardTo(input)->ReduceScatter(ctx, input, output, op);
  }
  absl::Status AllToAll(const OpContext& ctx, TensorRef input,
                        absl::Span<const int64_t> input_splits,
                        TensorRef output,
                        absl::Span<const int64_t> output_splits) override {
    return ForwardTo(input)->AllToAll(ctx, input, input_splits, output,
                                      output_splits);
  }
  absl::Status Send(const OpContext& ctx, TensorRef data, int dst,
                    int tag) override {
    return ForwardTo(data)->Send(ctx, data, dst, tag);
  }
  absl::Status Recv(const OpContext& ctx, TensorRef data, int src,
                    int tag) override {
    return ForwardTo(data)->Recv(ctx, data, src, tag);
  }

 protected:
  // The backend an operation on `tensor` (its data, or its input; a
  // scatter's output) goes to.
  virtual Backend* ForwardTo(const TensorRef& tensor) const = 0;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_FORWARDING_BACKEND_H_
