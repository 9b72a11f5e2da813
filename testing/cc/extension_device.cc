#include "testing/cc/extension_device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cc/comm/backend.h"
#include "cc/comm/backend_registry.h"
#include "cc/core/status.h"

namespace distkit {
namespace testing {
namespace {

std::atomic<size_t> allocation_limit{0};

void XorCopy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = s[i] ^ kExtensionXor;
}

// A host copy of an ext:0 tensor for the inner backend; Store() writes the
// result back. Host tensors (the contract's headers on send/recv) pass
// through unchanged.
class Staged {
 public:
  static absl::StatusOr<Staged> Of(const TensorRef& t) {
    Staged s;
    s.original_ = t;
    if (!t.device().is_ext()) {
      s.host_ref_ = t;
      return s;
    }
    s.host_.resize(t.nbytes());
    DK_RETURN_IF_ERROR(CopyBytes(s.host_.data(), Device::Cpu(), t.data(),
                                 t.device(), t.nbytes()));
    s.host_ref_ = t.At(s.host_.data(), Device::Cpu());
    return s;
  }
  const TensorRef& ref() const { return host_ref_; }
  absl::Status Store() const {
    if (!original_.device().is_ext()) return absl::OkStatus();
    return CopyBytes(original_.data(), original_.device(), host_.data(),
                     Device::Cpu(), original_.nbytes());
  }

 private:
  TensorRef original_;
  std::vector<char> host_;
  TensorRef host_ref_;
};

class ExtensionBackend : public Backend {
 public:
  explicit ExtensionBackend(std::unique_ptr<Backend> inner)
      : inner_(std::move(inner)) {}

  absl::string_view name() const override { return "ext_test"; }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Device comm_device() const override { return Device::Ext(0); }
  absl::Status CheckDevice(Device device) const override {
    if (device == Device::Ext(0)) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("the ext_test backend works on ext:0 tensors, got one on ",
                     device.ToString()));
  }
  absl::Status ExchangeSignatures(const OpContext& c, const OpSignature& mine,
                                  InlinePayload payload,
                                  absl::Span<OpSignature> all) override {
    // Inline payloads point at device memory here: never carried.
    return inner_->ExchangeSignatures(c, mine, InlinePayload{}, all);
  }
  absl::Status AllGatherHost(const OpContext& c, const void* in, size_t bytes,
                             void* out) override {
    return inner_->AllGatherHost(c, in, bytes, out);
  }

  absl::Status AllReduce(const OpContext& c, TensorRef t,
                         ReduceOp op) override {
    return InPlace(t, [&](TensorRef h) { return inner_->AllReduce(c, h, op); });
  }
  absl::Status Broadcast(const OpContext& c, TensorRef t, int root) override {
    return InPlace(t,
                   [&](TensorRef h) { return inner_->Broadcast(c, h, root); });
  }
  absl::Status Reduce(const OpContext& c, TensorRef t, ReduceOp op,
                      int root) override {
    return InPlace(t,
                   [&](TensorRef h) { return inner_->Reduce(c, h, op, root); });
  }
  absl::Status AllGather(const OpContext& c, TensorRef in,
                         TensorRef out) override {
    return InOut(in, out, [&](TensorRef i, TensorRef o) {
      return inner_->AllGather(c, i, o);
    });
  }
  absl::Status Gather(const OpContext& c, TensorRef in, TensorRef out,
                      int root) override {
    return InOut(in, out, [&](TensorRef i, TensorRef o) {
      return inner_->Gather(c, i, o, root);
    });
  }
  absl::Status Scatter(const OpContext& c, TensorRef in, TensorRef out,
                       int root) override {
    return InOut(in, out, [&](TensorRef i, TensorRef o) {
      return inner_->Scatter(c, i, o, root);
    });
  }
  absl::Status ReduceScatter(const OpContext& c, TensorRef in, TensorRef out,
                             ReduceOp op) override {
    return InOut(in, out, [&](TensorRef i, TensorRef o) {
      return inner_->ReduceScatter(c, i, o, op);
    });
  }
  absl::Status AllToAll(const OpContext& c, TensorRef in,
                        absl::Span<const int64_t> in_splits, TensorRef out,
                        absl::Span<const int64_t> out_splits) override {
    return InOut(in, out, [&](TensorRef i, TensorRef o) {
      return inner_->AllToAll(c, i, in_splits, o, out_splits);
    });
  }
  absl::Status Send(const OpContext& c, TensorRef t, int dst,
                    int tag) override {
    DK_ASSIGN_OR_RETURN(Staged s, Staged::Of(t));
    return inner_->Send(c, s.ref(), dst, tag);
  }
  absl::Status Recv(const OpContext& c, TensorRef t, int src,
                    int tag) override {
    return InPlace(t,
                   [&](TensorRef h) { return inner_->Recv(c, h, src, tag); });
  }
  void Abort() override { inner_->Abort(); }

 private:
  // The inner (host) operation on a staged copy of `t`, written back.
  template <typename F>
  static absl::Status InPlace(const TensorRef& t, F&& run) {
    DK_ASSIGN_OR_RETURN(Staged s, Staged::Of(t));
    DK_RETURN_IF_ERROR(run(s.ref()));
    return s.Store();
  }
  // The same with an input and an output; only the output is written back.
  template <typename F>
  static absl::Status InOut(const TensorRef& in, const TensorRef& out,
                            F&& run) {
    DK_ASSIGN_OR_RETURN(Staged i, Staged::Of(in));
    DK_ASSIGN_OR_RETURN(Staged o, Staged::Of(out));
    DK_RETURN_IF_ERROR(run(i.ref(), o.ref()));
    return o.Store();
  }

  std::unique_ptr<Backend> inner_;
};

absl::StatusOr<std::unique_ptr<Backend>> MakeExtensionBackend(
    const BackendConfig& config) {
  const BackendFactory* gloo = FindBackend("gloo");
  if (gloo == nullptr) {
    return absl::FailedPreconditionError("ext_test needs the gloo backend");
  }
  DK_ASSIGN_OR_RETURN(std::unique_ptr<Backend> inner, (*gloo)(config));
  return std::unique_ptr<Backend>(new ExtensionBackend(std::move(inner)));
}

}  // namespace

void InstallXorExtensionDevice() {
  static const bool installed = [] {
    ExtensionDeviceHooks hooks;
    hooks.allocate = [](size_t n) -> void* {
      const size_t limit = allocation_limit.load();
      return limit != 0 && n > limit ? nullptr : std::malloc(n);
    };
    hooks.free = [](void* p) { std::free(p); };
    hooks.to_device = XorCopy;
    hooks.to_host = XorCopy;
    hooks.on_device = [](void* d, const void* s, size_t n) {
      std::memmove(d, s, n);
    };
    InstallExtensionDevice(std::move(hooks));
    return RegisterBackend("ext_test", MakeExtensionBackend);
  }();
  (void)installed;
}

void SetExtensionDeviceLimit(size_t bytes) { allocation_limit = bytes; }

absl::StatusOr<ExtTensor> ToExtension(const void* host, int64_t numel,
                                      DataType dtype) {
  return ToDevice(host, numel, dtype, Device::Ext(0));
}

absl::StatusOr<ExtTensor> ToDevice(const void* host, int64_t numel,
                                   DataType dtype, Device device) {
  ExtTensor t;
  const size_t bytes = numel * ElementSize(dtype);
  DK_ASSIGN_OR_RETURN(t.buffer, DeviceBuffer::Allocate(device, bytes));
  DK_RETURN_IF_ERROR(
      CopyBytes(t.buffer.data(), device, host, Device::Cpu(), bytes));
  t.ref = TensorRef(t.buffer.data(), numel, dtype, device);
  return t;
}

absl::Status FromExtension(const TensorRef& ext, void* host) {
  return CopyBytes(host, Device::Cpu(), ext.data(), ext.device(), ext.nbytes());
}

}  // namespace testing
}  // namespace distkit
