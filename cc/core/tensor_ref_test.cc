#include "cc/core/tensor_ref.h"

#include "gtest/gtest.h"

namespace distkit {
namespace {

DLTensor MakeTensor(float* data, int64_t* shape, int ndim, int64_t* strides) {
  DLTensor t;
  t.data = data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = 0;
  return t;
}

TEST(TensorRefTest, ViewsContiguousTensor) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape[2] = {2, 3};
  DLTensor t = MakeTensor(data, shape, 2, nullptr);
  absl::StatusOr<TensorRef> ref = TensorRef::FromDLPack(&t, "input");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->numel(), 6);
  EXPECT_EQ(ref->nbytes(), 24u);
  EXPECT_EQ(ref->dtype(), DataType::kFloat32);
  EXPECT_EQ(ref->data<float>()[5], 6.0f);
  EXPECT_EQ(ref->DebugString(), "float32[2, 3] on cpu");

  int64_t strides[2] = {3, 1};
  t.strides = strides;
  EXPECT_TRUE(TensorRef::FromDLPack(&t, "input").ok());

  t.byte_offset = sizeof(float);
  shape[0] = 1;
  shape[1] = 5;
  strides[0] = 5;
  ref = TensorRef::FromDLPack(&t, "input");
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->data<float>()[0], 2.0f);
  EXPECT_EQ(ref->Slice(2, 2).data<float>()[1], 5.0f);
}

// An empty tensor without memory, with a byte offset (the tensor_args
// fuzzer's find: the offset was added to NULL, undefined behaviour that
// UBSan reports in the asan phase): accepted, and its data stays NULL.
TEST(TensorRefTest, EmptyTensorWithoutMemoryIgnoresItsOffset) {
  int64_t shape[1] = {0};
  DLTensor t = MakeTensor(nullptr, shape, 1, nullptr);
  t.byte_offset = 50;
  absl::StatusOr<TensorRef> ref = TensorRef::FromDLPack(&t, "input");
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->numel(), 0);
  EXPECT_EQ(ref->data(), nullptr);
}

TEST(TensorRefTest, OverlapsWhenSharingAByte) {
  float x[8] = {};
  const TensorRef all(x, 8, DataType::kFloat32);
  EXPECT_TRUE(all.Overlaps(all));
  EXPECT_TRUE(all.Overlaps(TensorRef(x + 7, 1, DataType::kFloat32)));
  EXPECT_TRUE(TensorRef(x + 3, 2, DataType::kFloat32).Overlaps(all));
  EXPECT_FALSE(TensorRef(x, 4, DataType::kFloat32)
                   .Overlaps(TensorRef(x + 4, 4, DataType::kFloat32)));
  // Bytes, not elements: the 4th float's last byte.
  EXPECT_TRUE(TensorRef(x, 4, DataType::kFloat32)
                  .Overlaps(TensorRef(reinterpret_cast<char*>(x) + 15, 1,
                                      DataType::kUInt8)));
  EXPECT_FALSE(all.Overlaps(TensorRef(x + 2, 0, DataType::kFloat32)));
}

TEST(TensorRefTest, RejectsNonContiguous) {
  float data[6] = {};
  int64_t shape[2] = {3, 2};
  int64_t strides[2] = {1, 3};  // a transpose
  DLTensor t = MakeTensor(data, shape, 2, strides);
  absl::Status s = TensorRef::FromDLPack(&t, "input").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("input: tensor is not contiguous"),
            absl::string_view::npos)
      << s;
}

TEST(TensorRefTest, RejectsBadArguments) {
  EXPECT_EQ(TensorRef::FromDLPack(nullptr, "out").status().message(),
            "out: tensor is NULL");
  float data[2] = {};
  int64_t shape[1] = {2};
  DLTensor t = MakeTensor(data, shape, 1, nullptr);
  t.dtype = DLDataType{kDLComplex, 64, 1};
  EXPECT_EQ(TensorRef::FromDLPack(&t, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.device = DLDevice{kDLVulkan, 0};
  EXPECT_EQ(TensorRef::FromDLPack(&t, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  t.device = DLDevice{kDLCPU, 0};
  t.data = nullptr;
  EXPECT_EQ(TensorRef::FromDLPack(&t, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  shape[0] = -1;
  t.data = data;
  EXPECT_EQ(TensorRef::FromDLPack(&t, "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace distkit
