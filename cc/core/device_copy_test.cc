#include "cc/core/device_copy.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(DeviceCopyTest, HostToHost) {
  const char src[] = "distkit";
  char dst[8] = {};
  ASSERT_TRUE(CopyBytes(dst, Device::Cpu(), src, Device::Cpu(), 8).ok());
  EXPECT_STREQ(dst, "distkit");
}

TEST(DeviceCopyTest, HostBuffer) {
  auto b = DeviceBuffer::Allocate(Device::Cpu(), 64);
  ASSERT_TRUE(b.ok());
  std::memset(b->data(), 7, 64);
  DeviceBuffer moved = std::move(*b);
  EXPECT_EQ(static_cast<char*>(moved.data())[63], 7);
  EXPECT_EQ(b->data(), nullptr);
}

TEST(DeviceCopyTest, CudaDevicesMatchWhatTheMachineHas) {
  const int count = CudaDeviceCount();
  EXPECT_EQ(DefaultDevice(3).is_cuda(), count > 0);
  if (count > 0) {
    EXPECT_EQ(DefaultDevice(3).index, 3 % count);
    return;  // the round trip is tested by tools/gpu_check.sh
  }
  // No usable GPU: CUDA devices are refused, naming the device.
  char buf[4] = {};
  absl::Status s = CopyBytes(buf, Device::Cuda(0), "abc", Device::Cpu(), 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(std::string(s.message()).find("cuda:0"), std::string::npos) << s;
  EXPECT_FALSE(DeviceBuffer::Allocate(Device::Cuda(1), 8).ok());
}

}  // namespace
}  // namespace distkit
