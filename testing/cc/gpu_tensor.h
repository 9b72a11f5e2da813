// GpuTensor: test values (doubles) stored on cuda:0 in any dtype distkit
// reduces, and read back as doubles. Shared by nccl_backend_test and
// tools/gpu_check (which builds without Bazel).

#ifndef DISTKIT_TESTING_CC_GPU_TENSOR_H_
#define DISTKIT_TESTING_CC_GPU_TENSOR_H_

#include <cstdint>
#include <vector>

#include "cc/core/device_copy.h"
#include "cc/core/half.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

class GpuTensor {
 public:
  GpuTensor(DataType dtype, const std::vector<double>& values)
      : dtype_(dtype), n_(static_cast<int64_t>(values.size())) {
    buf_ = *DeviceBuffer::Allocate(Device::Cuda(0), n_ * 8 + 8);
    std::vector<char> host(n_ * ElementSize(dtype_));
    for (int64_t i = 0; i < n_; ++i) Put(host.data(), i, values[i]);
    ok_ = CopyBytes(buf_.data(), Device::Cuda(0), host.data(), Device::Cpu(),
                    host.size())
              .ok();
  }

  // Whether the upload worked.
  bool ok() const { return ok_; }
  TensorRef ref() const {
    return TensorRef(buf_.data(), n_, dtype_, Device::Cuda(0));
  }
  std::vector<double> Read() const {
    std::vector<char> host(n_ * ElementSize(dtype_));
    std::vector<double> out(n_);
    if (!CopyBytes(host.data(), Device::Cpu(), buf_.data(), Device::Cuda(0),
                   host.size())
             .ok()) {
      return out;
    }
    for (int64_t i = 0; i < n_; ++i) out[i] = Get(host.data(), i);
    return out;
  }

 private:
  void Put(char* p, int64_t i, double v) const {
    switch (dtype_) {
      case DataType::kFloat32:
        reinterpret_cast<float*>(p)[i] = v;
        break;
      case DataType::kFloat64:
        reinterpret_cast<double*>(p)[i] = v;
        break;
      case DataType::kInt32:
        reinterpret_cast<int32_t*>(p)[i] = v;
        break;
      case DataType::kInt64:
        reinterpret_cast<int64_t*>(p)[i] = v;
        break;
      case DataType::kInt8:
        reinterpret_cast<int8_t*>(p)[i] = v;
        break;
      case DataType::kUInt8:
        reinterpret_cast<uint8_t*>(p)[i] = v;
        break;
      case DataType::kBool:
        reinterpret_cast<bool*>(p)[i] = v != 0;
        break;
      case DataType::kFloat16:
        reinterpret_cast<uint16_t*>(p)[i] = comm_internal::FloatToFloat16(v);
        break;
      case DataType::kBFloat16:
        reinterpret_cast<uint16_t*>(p)[i] = comm_internal::FloatToBFloat16(v);
        break;
    }
  }
  double Get(const char* p, int64_t i) const {
    switch (dtype_) {
      case DataType::kFloat32:
        return reinterpret_cast<const float*>(p)[i];
      case DataType::kFloat64:
        return reinterpret_cast<const double*>(p)[i];
      case DataType::kInt32:
        return reinterpret_cast<const int32_t*>(p)[i];
      case DataType::kInt64:
        return reinterpret_cast<const int64_t*>(p)[i];
      case DataType::kInt8:
        return reinterpret_cast<const int8_t*>(p)[i];
      case DataType::kUInt8:
        return reinterpret_cast<const uint8_t*>(p)[i];
      case DataType::kBool:
        return reinterpret_cast<const bool*>(p)[i];
      case DataType::kFloat16:
        return comm_internal::Float16ToFloat(
            reinterpret_cast<const uint16_t*>(p)[i]);
      case DataType::kBFloat16:
        return comm_internal::BFloat16ToFloat(
            reinterpret_cast<const uint16_t*>(p)[i]);
    }
    return 0;
  }

  DataType dtype_;
  int64_t n_;
  DeviceBuffer buf_;
  bool ok_ = false;
};

}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_GPU_TENSOR_H_
