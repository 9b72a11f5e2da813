#include "cc/core/host_staging.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace distkit {
namespace {

// An extension device whose memory holds every byte inverted, so that host
// arithmetic that skipped the staging copy computes garbage.
void InstallInvertingDevice() {
  auto invert = [](void* dst, const void* src, size_t n) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<unsigned char>(~s[i]);
  };
  ExtensionDeviceHooks hooks;
  hooks.allocate = [](size_t bytes) { return std::malloc(bytes); };
  hooks.free = [](void* p) { std::free(p); };
  hooks.to_device = invert;
  hooks.to_host = invert;
  hooks.on_device = [](void* dst, const void* src, size_t n) {
    std::memmove(dst, src, n);
  };
  InstallExtensionDevice(std::move(hooks));
}

class HostStagingTest : public ::testing::Test {
 protected:
  void SetUp() override { InstallInvertingDevice(); }
  void TearDown() override {
    buffers_.clear();  // freed through the hooks, before they go
    InstallExtensionDevice({});
  }

  // `values` on ext:0.
  TensorRef OnDevice(const std::vector<float>& values) {
    auto b = DeviceBuffer::Allocate(Device::Ext(0), values.size() * 4);
    EXPECT_TRUE(b.ok()) << b.status();
    buffers_.push_back(std::move(*b));
    TensorRef t(buffers_.back().data(), static_cast<int64_t>(values.size()),
                DataType::kFloat32, Device::Ext(0));
    EXPECT_TRUE(CopyBytes(t.data(), t.device(), values.data(), Device::Cpu(),
                          t.nbytes())
                    .ok());
    return t;
  }
  std::vector<float> Read(TensorRef t) {
    std::vector<float> out(t.numel());
    EXPECT_TRUE(
        CopyBytes(out.data(), Device::Cpu(), t.data(), t.device(), t.nbytes())
            .ok());
    return out;
  }

  std::vector<DeviceBuffer> buffers_;
};

TEST_F(HostStagingTest, HostMemoryIsWorkedOnInPlace) {
  std::vector<float> v = {1, 2, 3};
  TensorRef t(v.data(), 3, DataType::kFloat32);
  auto h = HostCopy::Of(t, /*read=*/false);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->host().data(), v.data());
  ASSERT_TRUE(ZeroFill(t).ok());
  EXPECT_EQ(v, std::vector<float>({0, 0, 0}));
}

TEST_F(HostStagingTest, DeviceMemoryIsStagedAndWrittenBack) {
  TensorRef t = OnDevice({1.5f, -2.f});
  auto h = HostCopy::Of(t, /*read=*/true);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_NE(h->host().data(), t.data());
  EXPECT_TRUE(h->host().device().is_cpu());
  EXPECT_EQ(h->host().data<float>()[0], 1.5f);
  h->host().data<float>()[1] = 4.f;
  EXPECT_EQ(Read(t), std::vector<float>({1.5f, -2.f}));  // not yet
  ASSERT_TRUE(h->WriteBack().ok());
  EXPECT_EQ(Read(t), std::vector<float>({1.5f, 4.f}));
}

TEST_F(HostStagingTest, ZeroAddAndCastOnADevice) {
  TensorRef acc = OnDevice({7.f, 7.f, 7.f});
  ASSERT_TRUE(ZeroFill(acc).ok());
  EXPECT_EQ(Read(acc), std::vector<float>({0, 0, 0}));
  std::vector<double> host = {0.5, 1.0, -3.0};
  TensorRef h(host.data(), 3, DataType::kFloat64);
  ASSERT_TRUE(AddInto(acc, h).ok());
  ASSERT_TRUE(AddInto(acc, OnDevice({1.f, 1.f, 1.f})).ok());
  EXPECT_EQ(Read(acc), std::vector<float>({1.5f, 2.f, -2.f}));
  // Device float32 -> host float64, and a same-dtype copy device -> device.
  ASSERT_TRUE(CastInto(h, acc).ok());
  EXPECT_EQ(host, std::vector<double>({1.5, 2.0, -2.0}));
  TensorRef copy = OnDevice({0, 0, 0});
  ASSERT_TRUE(CastInto(copy, acc).ok());
  EXPECT_EQ(Read(copy), Read(acc));
}

TEST_F(HostStagingTest, NonFloatingDtypesAreRefused) {
  std::vector<int32_t> ints(2);
  std::vector<float> floats(2);
  absl::Status s = CastInto(TensorRef(floats.data(), 2, DataType::kFloat32),
                            TensorRef(ints.data(), 2, DataType::kInt32));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace distkit
