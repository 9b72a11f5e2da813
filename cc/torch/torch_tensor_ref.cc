#include "cc/torch/torch_tensor_ref.h"

#include "absl/strings/str_cat.h"
#include "cc/core/status.h"

namespace distkit {

absl::StatusOr<DataType> DataTypeOf(torch::ScalarType type,
                                    absl::string_view owner) {
  switch (type) {
    case torch::kFloat:
      return DataType::kFloat32;
    case torch::kDouble:
      return DataType::kFloat64;
    case torch::kHalf:
      return DataType::kFloat16;
    case torch::kBFloat16:
      return DataType::kBFloat16;
    case torch::kLong:
      return DataType::kInt64;
    case torch::kInt:
      return DataType::kInt32;
    case torch::kChar:
      return DataType::kInt8;
    case torch::kByte:
      return DataType::kUInt8;
    case torch::kBool:
      return DataType::kBool;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          owner, ": unsupported dtype ", std::string(c10::toString(type))));
  }
}

torch::ScalarType ScalarTypeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return torch::kFloat;
    case DataType::kFloat64:
      return torch::kDouble;
    case DataType::kFloat16:
      return torch::kHalf;
    case DataType::kBFloat16:
      return torch::kBFloat16;
    case DataType::kInt64:
      return torch::kLong;
    case DataType::kInt32:
      return torch::kInt;
    case DataType::kInt8:
      return torch::kChar;
    case DataType::kUInt8:
      return torch::kByte;
    case DataType::kBool:
      return torch::kBool;
  }
  return torch::kFloat;
}

absl::StatusOr<Device> DeviceOf(const torch::Device& device,
                                absl::string_view owner) {
  if (device.is_cpu()) return Device::Cpu();
  if (device.is_cuda())
    return Device::Cuda(device.has_index() ? device.index() : 0);
  return absl::InvalidArgumentError(
      absl::StrCat(owner, ": unsupported device ", device.str()));
}

torch::Device TorchDeviceOf(Device device) {
  if (device.is_cuda()) return torch::Device(torch::kCUDA, device.index);
  return torch::Device(torch::kCPU);
}

absl::StatusOr<TensorRef> AsTensorRef(const torch::Tensor& t,
                                      absl::string_view owner,
                                      absl::string_view what) {
  if (!t.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat(owner, ": ", what, " is not contiguous"));
  }
  DK_ASSIGN_OR_RETURN(DataType dtype, DataTypeOf(t.scalar_type(), owner));
  DK_ASSIGN_OR_RETURN(Device device, DeviceOf(t.device(), owner));
  return TensorRef(t.data_ptr(), t.sizes().vec(), dtype, device);
}

torch::Tensor AsTorchTensor(const TensorRef& ref, c10::IntArrayRef shape) {
  return torch::from_blob(ref.data(), shape,
                          torch::TensorOptions()
                              .dtype(ScalarTypeOf(ref.dtype()))
                              .device(TorchDeviceOf(ref.device())));
}

}  // namespace distkit
