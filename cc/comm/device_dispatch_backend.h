// DeviceDispatchBackend is mmengine's "cpu:gloo,cuda:nccl": CPU tensors go to
// one backend (Gloo), CUDA tensors to another (NCCL); the contract has
// checked that an operation's tensors share one device. The contract's
// signature exchange and metadata run on the CPU half. It needs no CUDA
// itself, so it is tested with any two backends.

#ifndef DISTKIT_CC_COMM_DEVICE_DISPATCH_BACKEND_H_
#define DISTKIT_CC_COMM_DEVICE_DISPATCH_BACKEND_H_

#include <memory>
#include <string>

#include "cc/comm/backend.h"
#include "cc/comm/forwarding_backend.h"

namespace distkit {

class DeviceDispatchBackend : public ForwardingBackend {
 public:
  // `name` is the registry's ("cpu:gloo,cuda:nccl"); both halves span the
  // same ranks.
  DeviceDispatchBackend(std::string name, std::unique_ptr<Backend> cpu,
                        std::unique_ptr<Backend> cuda)
      : name_(std::move(name)), cpu_(std::move(cpu)), cuda_(std::move(cuda)) {}

  absl::string_view name() const override { return name_; }
  int rank() const override { return cpu_->rank(); }
  int size() const override { return cpu_->size(); }
  Device comm_device() const override { return cuda_->comm_device(); }
  absl::Status CheckDevice(Device d) const override {
    return d.is_cpu() ? absl::OkStatus() : cuda_->CheckDevice(d);
  }
  int32_t PathFor(Device d) const override { return d.is_cpu() ? 1 : 2; }
  bool NativeMean(DataType dtype, Device d) const override {
    return For(d)->NativeMean(dtype, d);
  }
  absl::Status CheckReduce(ReduceOp op, DataType dtype,
                           Device d) const override {
    return For(d)->CheckReduce(op, dtype, d);
  }

  absl::Status SetCudaStream(void* stream) override {
    return cuda_->SetCudaStream(stream);
  }
  void* cuda_stream() const override { return cuda_->cuda_stream(); }
  bool NamesLostPeers() const override {
    return cpu_->NamesLostPeers() && cuda_->NamesLostPeers();
  }
  DevicePlace WhereOpFailed(const OpContext& c) override {
    return cuda_->WhereOpFailed(c);  // the host half cannot tell
  }
  absl::StatusOr<void*> MarkIssue(Device d) override {
    return For(d)->MarkIssue(d);
  }
  // Only the CUDA half makes marks.
  void ReleaseIssueMark(void* mark) override { cuda_->ReleaseIssueMark(mark); }

  absl::Status ExchangeSignatures(const OpContext& c, const OpSignature& mine,
                                  InlinePayload payload,
                                  absl::Span<OpSignature> all) override {
    return cpu_->ExchangeSignatures(c, mine, payload, all);
  }
  absl::Status AllGatherHost(const OpContext& c, const void* in, size_t bytes,
                             void* out) override {
    return cpu_->AllGatherHost(c, in, bytes, out);
  }

  void Abort() override {
    cpu_->Abort();
    cuda_->Abort();
  }

 protected:
  // Data movement goes to the half of the tensors' device.
  Backend* ForwardTo(const TensorRef& t) const override {
    return For(t.device());
  }
  // A lane serves both devices: concurrent only where both backends are.
  bool ConcurrentTags() const override {
    return cpu_->ConcurrentTags() &&
           (cuda_ == nullptr || cuda_->ConcurrentTags());
  }

 private:
  Backend* For(Device d) const { return d.is_cpu() ? cpu_.get() : cuda_.get(); }

  const std::string name_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> cuda_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_DEVICE_DISPATCH_BACKEND_H_
