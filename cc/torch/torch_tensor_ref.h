// torch::Tensor <-> distkit's TensorRef and DataType: the LibTorch wrappers
// hand the engines (GradReducer, FlatShard) views of torch memory through
// these, and wrap engine memory as torch tensors.

#ifndef DISTKIT_CC_TORCH_TORCH_TENSOR_REF_H_
#define DISTKIT_CC_TORCH_TORCH_TENSOR_REF_H_

// Tensor, ScalarType, Device and from_blob: the frontend's types only, not
// torch/torch.h (which parses in 20 s; this in 7).
#include <torch/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cc/core/data_type.h"
#include "cc/core/device.h"
#include "cc/core/tensor_ref.h"

namespace distkit {

// INVALID_ARGUMENT "<owner>: unsupported dtype <t>" for types distkit has no
// DataType for.
absl::StatusOr<DataType> DataTypeOf(torch::ScalarType type,
                                    absl::string_view owner);
torch::ScalarType ScalarTypeOf(DataType dtype);

absl::StatusOr<Device> DeviceOf(const torch::Device& device,
                                absl::string_view owner);
torch::Device TorchDeviceOf(Device device);

// A view of `t`'s memory (CPU or CUDA). `t` must be contiguous; `what`
// names it in errors ("<owner>: <what> is not contiguous").
absl::StatusOr<TensorRef> AsTensorRef(const torch::Tensor& t,
                                      absl::string_view owner,
                                      absl::string_view what);

// A torch tensor over `ref`'s memory (not owned: valid while `ref` is).
torch::Tensor AsTorchTensor(const TensorRef& ref, c10::IntArrayRef shape);

}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_TORCH_TENSOR_REF_H_
