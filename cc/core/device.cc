#include "cc/core/device.h"

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace distkit {

std::string Device::ToString() const {
  if (is_cpu()) return "cpu";
  return absl::StrCat("cuda:", index);
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
  switch (dl.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return Device::Cpu();
    case kDLCUDA:
      if (dl.device_id < 0) break;
      return Device::Cuda(dl.device_id);
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported DLPack device (type=", static_cast<int>(dl.device_type),
      ", id=", dl.device_id, "); distkit handles cpu and cuda"));
}

DLDevice ToDLPack(Device device) {
  DLDevice dl;
  dl.device_type = device.is_cpu() ? kDLCPU : kDLCUDA;
  dl.device_id = device.is_cpu() ? 0 : device.index;
  return dl;
}

}  // namespace distkit
