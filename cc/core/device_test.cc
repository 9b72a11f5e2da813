#include "cc/core/device.h"

#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(DeviceTest, TextRoundTrip) {
  EXPECT_EQ(Device::Cpu().ToString(), "cpu");
  EXPECT_EQ(Device::Cuda(3).ToString(), "cuda:3");
  EXPECT_EQ(*ParseDevice("cpu"), Device::Cpu());
  EXPECT_EQ(*ParseDevice("cuda"), Device::Cuda(0));
  EXPECT_EQ(*ParseDevice("cuda:2"), Device::Cuda(2));
  EXPECT_FALSE(ParseDevice("cuda:-1").ok());
  EXPECT_FALSE(ParseDevice("npu:0").ok());
}

TEST(DeviceTest, DLPack) {
  EXPECT_EQ(*DeviceFromDLPack(DLDevice{kDLCPU, 0}), Device::Cpu());
  EXPECT_EQ(*DeviceFromDLPack(DLDevice{kDLCUDA, 1}), Device::Cuda(1));
  EXPECT_EQ(*DeviceFromDLPack(DLDevice{kDLCUDAHost, 0}), Device::Cpu());
  EXPECT_EQ(DeviceFromDLPack(DLDevice{kDLOpenCL, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  DLDevice dl = ToDLPack(Device::Cuda(5));
  EXPECT_EQ(dl.device_type, kDLCUDA);
  EXPECT_EQ(dl.device_id, 5);
}

}  // namespace
}  // namespace distkit
