#include "cc/core/device.h"

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace distkit {

std::string Device::ToString() const {
  if (is_cpu()) return "cpu";
  return absl::StrCat(is_ext() ? "ext:" : "cuda:", index);
}

absl::StatusOr<Device> ParseDevice(absl::string_view text) {
  if (text == "cpu") return Device::Cpu();
  if (text == "cuda") return Device::Cuda(0);
  absl::string_view rest = text;
  int index = 0;
  if (absl::ConsumePrefix(&rest, "cuda:") && absl::SimpleAtoi(rest, &index) &&
      index >= 0) {
    return Device::Cuda(index);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown device '", text, "' (expected cpu, cuda or cuda:<n>)"));
}

absl::StatusOr<Device> DeviceFromDLPack(DLDevice dl) {
  // A C caller may put any integer in the enum field; reading it as the enum
  // when it is not one of DLDeviceType's values is undefined in C++, so it is
  // read as the int it is (found by //tools/fuzz:tensor_args).
  int32_t type;
  static_assert(sizeof(type) == sizeof(dl.device_type));
  std::memcpy(&type, &dl.device_type, sizeof(type));
  switch (type) {
    case kDLCPU:
    case kDLCUDAHost:
      return Device::Cpu();
    case kDLCUDA:
      if (dl.device_id < 0) break;
      return Device::Cuda(dl.device_id);
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported DLPack device (type=", type,
                   ", id=", dl.device_id, "); distkit handles cpu and cuda"));
}

DLDevice ToDLPack(Device device) {
  DLDevice dl;
  dl.device_type = device.is_cpu()   ? kDLCPU
                   : device.is_ext() ? kDLExtDev
                                     : kDLCUDA;
  dl.device_id = device.is_cpu() ? 0 : device.index;
  return dl;
}

}  // namespace distkit
