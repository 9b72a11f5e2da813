// Device says where a buffer lives: the host ("cpu") or one CUDA device
// ("cuda:1"). It converts to and from DLPack's DLDevice and torch-style text.

#ifndef DISTKIT_CC_CORE_DEVICE_H_
#define DISTKIT_CC_CORE_DEVICE_H_

#include <dlpack/dlpack.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distkit {

enum class DeviceType : int32_t {
  kCpu = 0,
  kCuda = 1,
  // An extension device (DLPack's kDLExtDev): memory that only the hooks
  // installed with InstallExtensionDevice (device_copy.h) can reach. Never
  // accepted through the C ABI; tests use it to prove the casting rule on
  // machines without a GPU.
  kExt = 2,
};

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;  // Always 0 for the CPU.

  static Device Cpu() { return Device{DeviceType::kCpu, 0}; }
  static Device Cuda(int index) { return Device{DeviceType::kCuda, index}; }
  static Device Ext(int index) { return Device{DeviceType::kExt, index}; }

  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  bool is_ext() const { return type == DeviceType::kExt; }

  // "cpu", "cuda:<index>" or "ext:<index>".
  std::string ToString() const;

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

// Parses "cpu", "cuda", "cuda:<n>" (torch's spelling; "cuda" means index 0).
absl::StatusOr<Device> ParseDevice(absl::string_view text);

// kDLCPU (and pinned host memory, kDLCUDAHost) -> cpu; kDLCUDA -> cuda:<id>.
// Other device types are INVALID_ARGUMENT.
absl::StatusOr<Device> DeviceFromDLPack(DLDevice dl);
DLDevice ToDLPack(Device device);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_DEVICE_H_
