// Registers "nccl" and "cpu:gloo,cuda:nccl" with the backend registry, so the
// process group finds them in builds that have CUDA (this library is linked
// only then).
#include <memory>

#include "absl/strings/str_cat.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/gloo/gloo_backend.h"
#include "cc/comm/nccl/nccl_backend.h"
#include "cc/core/status.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

// mmengine's "cpu:gloo,cuda:nccl": CPU tensors go to Gloo, CUDA tensors to
// NCCL (the contract has checked that an operation's tensors share one
// device); the contract's signature exchange and metadata run on Gloo.
class DeviceDispatchBackend : public Backend {
 public:
  DeviceDispatchBackend(std::unique_ptr<Backend> cpu,
                        std::unique_ptr<Backend> cuda)
      : cpu_(std::move(cpu)), cuda_(std::move(cuda)) {}

  absl::string_view name() const override { return "cpu:gloo,cuda:nccl"; }
  int rank() const override { return cpu_->rank(); }
  int size() const override { return cpu_->size(); }
  Device comm_device() const override { return cuda_->comm_device(); }
  absl::Status CheckDevice(Device d) const override {
    return d.is_cpu() ? absl::OkStatus() : cuda_->CheckDevice(d);
  }
  bool NativeMean(DataType dtype, Device d) const override {
    return For(d)->NativeMean(dtype, d);
  }
  absl::Status CheckReduce(ReduceOp op, DataType dtype,
                           Device d) const override {
    return For(d)->CheckReduce(op, dtype, d);
  }

  absl::Status ExchangeSignatures(const OpContext& c, const OpSignature& mine,
                                  InlinePayload payload,
                                  absl::Span<OpSignature> all) override {
    return cpu_->ExchangeSignatures(c, mine, payload, all);
  }
  absl::Status AllGatherHost(const OpContext& c, const void* in, size_t bytes,
                             void* out) override {
    return cpu_->AllGatherHost(c, in, bytes, out);
  }

  absl::Status AllReduce(const OpContext& c, TensorRef t,
                         ReduceOp op) override {
    return For(t)->AllReduce(c, t, op);
  }
  absl::Status Broadcast(const OpContext& c, TensorRef t, int root) override {
    return For(t)->Broadcast(c, t, root);
  }
  absl::Status Reduce(const OpContext& c, TensorRef t, ReduceOp op,
                      int root) override {
    return For(t)->Reduce(c, t, op, root);
  }
  absl::Status AllGather(const OpContext& c, TensorRef in,
                         TensorRef out) override {
    return For(in)->AllGather(c, in, out);
  }
  absl::Status Gather(const OpContext& c, TensorRef in, TensorRef out,
                      int root) override {
    return For(in)->Gather(c, in, out, root);
  }
  absl::Status Scatter(const OpContext& c, TensorRef in, TensorRef out,
                       int root) override {
    return For(out)->Scatter(c, in, out, root);
  }
  absl::Status ReduceScatter(const OpContext& c, TensorRef in, TensorRef out,
                             ReduceOp op) override {
    return For(in)->ReduceScatter(c, in, out, op);
  }
  absl::Status AllToAll(const OpContext& c, TensorRef in,
                        absl::Span<const int64_t> in_splits, TensorRef out,
                        absl::Span<const int64_t> out_splits) override {
    return For(in)->AllToAll(c, in, in_splits, out, out_splits);
  }
  absl::Status Send(const OpContext& c, TensorRef t, int dst,
                    int tag) override {
    return For(t)->Send(c, t, dst, tag);
  }
  absl::Status Recv(const OpContext& c, TensorRef t, int src,
                    int tag) override {
    return For(t)->Recv(c, t, src, tag);
  }
  void Abort() override {
    cpu_->Abort();
    cuda_->Abort();
  }

 private:
  Backend* For(Device d) const { return d.is_cpu() ? cpu_.get() : cuda_.get(); }
  Backend* For(const TensorRef& t) const { return For(t.device()); }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> cuda_;
};

absl::StatusOr<std::unique_ptr<Backend>> MakeNccl(const BackendConfig& config) {
  DK_ASSIGN_OR_RETURN(std::unique_ptr<NcclBackend> b,
                      NcclBackend::Create(config));
  return std::unique_ptr<Backend>(std::move(b));
}

absl::StatusOr<std::unique_ptr<Backend>> MakeDispatch(
    const BackendConfig& config) {
  BackendConfig nccl = config;
  nccl.store = std::make_shared<PrefixStore>("nccl", config.store);
  DK_ASSIGN_OR_RETURN(std::unique_ptr<NcclBackend> cuda,
                      NcclBackend::Create(nccl));
  BackendConfig gloo = config;
  gloo.store = std::make_shared<PrefixStore>("gloo", config.store);
  DK_ASSIGN_OR_RETURN(std::unique_ptr<GlooBackend> cpu,
                      GlooBackend::Create(gloo));
  return std::unique_ptr<Backend>(
      new DeviceDispatchBackend(std::move(cpu), std::move(cuda)));
}

const bool registered = RegisterBackend("nccl", MakeNccl) &&
                        RegisterBackend("cpu:gloo,cuda:nccl", MakeDispatch);

}  // namespace
}  // namespace distkit
