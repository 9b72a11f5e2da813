// GpuTensor: test values (doubles) stored on a CUDA device (cuda:0 unless
// given) in any dtype distkit reduces, and read back as doubles. Shared by
// nccl_backend_test and tools/gpu_check (which builds without Bazel).

#ifndef DISTKIT_TESTING_CC_GPU_TENSOR_H_
#define DISTKIT_TESTING_CC_GPU_TENSOR_H_

#include <cstdint>
#include <vector>

#include "cc/core/device_copy.h"
#include "cc/core/tensor_ref.h"
#include "testing/cc/typed_values.h"

namespace distkit {

class GpuTensor {
 public:
  GpuTensor(DataType dtype, const std::vector<double>& values,
            Device device = Device::Cuda(0))
      : dtype_(dtype),
        n_(static_cast<int64_t>(values.size())),
        device_(device) {
    absl::StatusOr<DeviceBuffer> buf =
        DeviceBuffer::Allocate(device_, n_ * 8 + 8);
    if (!buf.ok()) return;
    buf_ = *std::move(buf);
    std::vector<char> host(n_ * ElementSize(dtype_));
    for (int64_t i = 0; i < n_; ++i) Put(host.data(), i, values[i]);
    ok_ =
        CopyBytes(buf_.data(), device_, host.data(), Device::Cpu(), host.size())
            .ok();
  }

  // Whether the upload worked.
  bool ok() const { return ok_; }
  TensorRef ref() const { return TensorRef(buf_.data(), n_, dtype_, device_); }
  std::vector<double> Read() const {
    std::vector<char> host(n_ * ElementSize(dtype_));
    std::vector<double> out(n_);
    if (!CopyBytes(host.data(), Device::Cpu(), buf_.data(), device_,
                   host.size())
             .ok()) {
      return out;
    }
    for (int64_t i = 0; i < n_; ++i) out[i] = Get(host.data(), i);
    return out;
  }

 private:
  void Put(char* p, int64_t i, double v) const {
    testing::SetElement(p, dtype_, i, v);
  }
  double Get(const char* p, int64_t i) const {
    return testing::GetElement(p, dtype_, i);
  }

  DataType dtype_;
  int64_t n_;
  Device device_;
  DeviceBuffer buf_;
  bool ok_ = false;
};

}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_GPU_TENSOR_H_
