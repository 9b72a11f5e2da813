// mmengine.dist.utils' get_data_device and cast_data_device for LibTorch
// data: a tensor, or lists, tuples and string-keyed dicts of them, nested,
// in a c10::IValue. The rules and messages are mmengine's: every tensor on
// one device, no empty container, and `out` (when given) of the same shape
// of containers, receiving the cast values with copy_.

#ifndef DISTKIT_CC_TORCH_DATA_DEVICE_H_
#define DISTKIT_CC_TORCH_DATA_DEVICE_H_

// IValue and the tensor types, not torch/torch.h (20 s of parsing per
// translation unit; these 9).
#include <ATen/core/ivalue.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "absl/status/statusor.h"

namespace distkit {

// The one device of every tensor in `data`. INVALID_ARGUMENT "device type in
// data should be consistent, but got <a> and <b>" or "data should not be
// empty."; a value that is neither tensor nor container: INVALID_ARGUMENT
// "data should be a Tensor, sequence of tensor or dict, but got <type>".
absl::StatusOr<torch::Device> GetDataDevice(const c10::IValue& data);

// `data` with every tensor on `device` (tensors already there are kept, not
// copied). With `out`, each cast tensor is also copied into the matching
// tensor of `out`, which must have the same structure.
absl::StatusOr<c10::IValue> CastDataDevice(const c10::IValue& data,
                                           const torch::Device& device,
                                           const c10::IValue* out = nullptr);

}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_DATA_DEVICE_H_
