// A device that is not the host, for machines without a GPU: proves that
// every path which must cast data to a communication device and back (the
// casting rule, the device-generic reducer) really copies.
//
// InstallXorExtensionDevice() makes Device::Ext(0) real: its memory is host
// memory holding every byte XOR 0xA5, reachable only through CopyBytes. Code
// that reads or writes it as host memory gets wrong values, so a forgotten
// copy fails a test instead of passing.
//
// It also registers the backend "ext_test": the "gloo" backend (shared
// memory or TCP) behind a device check and a staging step, so its comm
// device is ext:0 and it refuses host tensors for data, as NCCL refuses host
// memory. With it, a group's comm device differs from the host where test
// data lives, on any machine.

#ifndef DISTKIT_TESTING_CC_EXTENSION_DEVICE_H_
#define DISTKIT_TESTING_CC_EXTENSION_DEVICE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/core/device_copy.h"
#include "cc/core/tensor_ref.h"

namespace distkit {
namespace testing {

constexpr unsigned char kExtensionXor = 0xA5;

// Installs ext:0 (idempotent) and registers "ext_test".
void InstallXorExtensionDevice();

// Allocations on ext:0 above `bytes` fail from now on (0: no limit), as a
// GPU runs out of memory.
void SetExtensionDeviceLimit(size_t bytes);

// A tensor on ext:0 holding `values` (as `dtype`'s bytes), and back.
struct ExtTensor {
  DeviceBuffer buffer;
  TensorRef ref;
};
absl::StatusOr<ExtTensor> ToExtension(const void* host, int64_t numel,
                                      DataType dtype);
// The same on any device (a CUDA device where the test runs on one, or the
// CUDA simulator); FromExtension reads any device back.
absl::StatusOr<ExtTensor> ToDevice(const void* host, int64_t numel,
                                   DataType dtype, Device device);
absl::Status FromExtension(const TensorRef& ext, void* host);

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_EXTENSION_DEVICE_H_
