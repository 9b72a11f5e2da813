// TensorRef is a checked, non-owning view of a dense buffer: data pointer,
// element count, dtype, device and shape. Collectives take TensorRefs. One made
// from a DLTensor has been checked once, at the boundary: known dtype, cpu or
// cuda, and contiguous (row-major). A non-contiguous tensor is an error, never
// a silent copy, because a collective writes its result back in place.
//
//   DK_ASSIGN_OR_RETURN(TensorRef t, TensorRef::FromDLPack(dl, "input"));
//   float* p = t.data<float>();

#ifndef DISTKIT_CC_CORE_TENSOR_REF_H_
#define DISTKIT_CC_CORE_TENSOR_REF_H_

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cc/core/data_type.h"
#include "cc/core/device.h"

namespace distkit {

class TensorRef {
 public:
  TensorRef() = default;

  // A 1-D view of `numel` elements at `data`.
  TensorRef(void* data, int64_t numel, DataType dtype,
            Device device = Device::Cpu());

  // A view with an explicit shape; numel is the product of `shape`.
  TensorRef(void* data, absl::Span<const int64_t> shape, DataType dtype,
            Device device = Device::Cpu());

  // The largest buffer any call accepts: 2^47 bytes (128 TiB, the user
  // address space of x86-64 and AArch64). A size beyond it cannot describe
  // real memory; it is a caller's error, refused before any arithmetic on it
  // can overflow.
  static constexpr int64_t kMaxBytes = int64_t{1} << 47;

  // INVALID_ARGUMENT naming `what` when numel is negative or the byte size
  // exceeds kMaxBytes (or overflows).
  absl::Status CheckSize(absl::string_view what) const;

  // Checks `tensor` and views it. `arg_name` goes into error messages
  // ("input: tensor is not contiguous ...").
  static absl::StatusOr<TensorRef> FromDLPack(const DLTensor* tensor,
                                              absl::string_view arg_name);

  void* data() const { return data_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(data_);
  }
  int64_t numel() const { return numel_; }
  size_t nbytes() const {
    return static_cast<size_t>(numel_) * ElementSize(dtype_);
  }
  DataType dtype() const { return dtype_; }
  Device device() const { return device_; }
  absl::Span<const int64_t> shape() const { return shape_; }

  // The same view (shape, element count, dtype) of memory at `data` on
  // `device`: a staged copy of this tensor. Unlike building one from
  // shape(), it keeps an empty default TensorRef empty.
  TensorRef At(void* data, Device device) const {
    TensorRef t = *this;
    t.data_ = data;
    t.device_ = device;
    return t;
  }

  // Whether this view and `other` share a byte of memory (on one device);
  // an empty view shares none.
  bool Overlaps(const TensorRef& other) const {
    const char* a = static_cast<const char*>(data_);
    const char* b = static_cast<const char*>(other.data_);
    return device_ == other.device_ && nbytes() > 0 && other.nbytes() > 0 &&
           a < b + other.nbytes() && b < a + nbytes();
  }

  // A 1-D view of elements [offset, offset + count) of this buffer.
  TensorRef Slice(int64_t offset, int64_t count) const;

  // "float32[2, 3] on cpu", for messages.
  std::string DebugString() const;

 private:
  void* data_ = nullptr;
  int64_t numel_ = 0;
  DataType dtype_ = DataType::kFloat32;
  Device device_;
  // Inline up to 4 dimensions: a view is copied several times on its way
  // through every operation, and a heap-allocated shape made each copy a
  // malloc and a free.
  absl::InlinedVector<int64_t, 4> shape_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_TENSOR_REF_H_
