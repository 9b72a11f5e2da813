// GetDataDevice / CastDataDevice on CPU data, with mmengine's messages. (A
// CPU-only LibTorch has no second device to cast to; tools/gpu_check.sh's
// Python checks cover CUDA.)
#include "cc/torch/data_device.h"

#include "gtest/gtest.h"

namespace distkit {
namespace {

c10::IValue Nested() {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericList l(c10::TensorType::get());
  l.push_back(torch::ones({2}));
  l.push_back(torch::zeros({3}));
  d.insert("a", torch::arange(4));
  d.insert("b", l);
  d.insert("c", c10::ivalue::Tuple::create({torch::full({1}, 7.0)}));
  return c10::IValue(d);
}

TEST(DataDevice, GetDataDevice) {
  EXPECT_EQ(*GetDataDevice(torch::ones({1})), torch::Device(torch::kCPU));
  EXPECT_EQ(*GetDataDevice(Nested()), torch::Device(torch::kCPU));
  c10::impl::GenericList empty(c10::TensorType::get());
  EXPECT_EQ(GetDataDevice(c10::IValue(empty)).status().message(),
            "data should not be empty.");
  EXPECT_EQ(GetDataDevice(c10::IValue(3)).status().message(),
            "data should be a Tensor, sequence of tensor or dict, but got Int");
}

TEST(DataDevice, CastKeepsStructureAndTensorsAlreadyThere) {
  const c10::IValue data = Nested();
  auto cast = CastDataDevice(data, torch::Device(torch::kCPU));
  ASSERT_TRUE(cast.ok()) << cast.status();
  const auto d = cast->toGenericDict();
  // Already on the device: the same tensor, not a copy (as torch's .to).
  EXPECT_TRUE(
      d.at("a").toTensor().is_same(data.toGenericDict().at("a").toTensor()));
  EXPECT_EQ(d.at("b").toList().size(), 2u);
  EXPECT_TRUE(d.at("c").isTuple());
}

TEST(DataDevice, CastIntoOut) {
  const c10::IValue data = Nested();
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  c10::impl::GenericList l(c10::TensorType::get());
  l.push_back(torch::empty({2}));
  l.push_back(torch::empty({3}));
  out.insert("a", torch::empty({4}, torch::kLong));
  out.insert("b", l);
  out.insert("c", c10::ivalue::Tuple::create({torch::empty({1})}));
  const c10::IValue out_value(out);
  ASSERT_TRUE(
      CastDataDevice(data, torch::Device(torch::kCPU), &out_value).ok());
  EXPECT_TRUE(torch::equal(out.at("a").toTensor(), torch::arange(4)));
  EXPECT_EQ(out.at("c").toTupleRef().elements()[0].toTensor().item<float>(),
            7.0f);
  auto bad =
      CastDataDevice(torch::ones({1}), torch::Device(torch::kCPU), &out_value);
  EXPECT_EQ(bad.status().message(),
            "out should be the same type with data, but got data is Tensor "
            "and out is GenericDict");
}

}  // namespace
}  // namespace distkit
