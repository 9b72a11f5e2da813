// Registers "nccl" and "cpu:gloo,cuda:nccl" with the backend registry, so the
// process group finds them in builds that have CUDA (this library is linked
// only then).
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/gloo/gloo_backend.h"
#include "cc/comm/nccl/nccl_backend.h"
#include "cc/core/status.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

// mmengine's "cpu:gloo,cuda:nccl": CPU tensors go to Gloo, CUDA tensors to
// NCCL; barriers run on Gloo.
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
    DK_ASSIGN_OR_RETURN(Backend * b, Both(c, in, out));
    return b->AllGather(c, in, out);
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
    DK_ASSIGN_OR_RETURN(Backend * b, Both(c, in, out));
    return b->ReduceScatter(c, in, out, op);
  }
  absl::Status AllToAll(const OpContext& c, TensorRef in,
                        absl::Span<const int64_t> in_splits, TensorRef out,
                        absl::Span<const int64_t> out_splits) override {
    DK_ASSIGN_OR_RETURN(Backend * b, Both(c, in, out));
    return b->AllToAll(c, in, in_splits, out, out_splits);
  }
  absl::Status Barrier(const OpContext& c) override { return cpu_->Barrier(c); }
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
  Backend* For(const TensorRef& t) const {
    return t.device().is_cpu() ? cpu_.get() : cuda_.get();
  }
  absl::StatusOr<Backend*> Both(const OpContext& c, const TensorRef& a,
                                const TensorRef& b) const {
    if (a.device() != b.device()) {
      return absl::InvalidArgumentError(
          absl::StrCat(c.Describe(), ": input is on ", a.device().ToString(),
                       " but output on ", b.device().ToString(),
                       "; cpu:gloo,cuda:nccl needs both on one device"));
    }
    return For(a);
  }

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
  GlooBackend::Options options;
  options.timeout = config.timeout;
  options.hostname = config.hostname;
  if (options.hostname.empty()) {
    const char* env = std::getenv("DISTKIT_GLOO_HOSTNAME");
    options.hostname = env != nullptr && *env ? env : "127.0.0.1";
  }
  DK_ASSIGN_OR_RETURN(
      std::unique_ptr<GlooBackend> cpu,
      GlooBackend::Create(std::make_shared<PrefixStore>("gloo", config.store),
                          config.rank, config.size, options));
  return std::unique_ptr<Backend>(
      new DeviceDispatchBackend(std::move(cpu), std::move(cuda)));
}

const bool registered = RegisterBackend("nccl", MakeNccl) &&
                        RegisterBackend("cpu:gloo,cuda:nccl", MakeDispatch);

}  // namespace
}  // namespace distkit
