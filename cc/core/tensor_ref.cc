#include "cc/core/tensor_ref.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/status.h"

namespace distkit {

TensorRef::TensorRef(void* data, int64_t numel, DataType dtype, Device device)
    : data_(data),
      numel_(numel),
      dtype_(dtype),
      device_(device),
      shape_{numel} {}

TensorRef::TensorRef(void* data, absl::Span<const int64_t> shape,
                     DataType dtype, Device device)
    : data_(data),
      dtype_(dtype),
      device_(device),
      shape_(shape.begin(), shape.end()) {
  // A negative extent or a product that overflows leaves numel -1, which
  // CheckSize refuses (every operation checks it before using the size).
  numel_ = 1;
  for (int64_t d : shape_) {
    if (d < 0 || __builtin_mul_overflow(numel_, d, &numel_)) {
      numel_ = -1;
      return;
    }
  }
}

absl::StatusOr<TensorRef> TensorRef::FromDLPack(const DLTensor* tensor,
                                                absl::string_view arg_name) {
  if (tensor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(arg_name, ": tensor is NULL"));
  }
  if (tensor->ndim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(arg_name, ": negative ndim ", tensor->ndim));
  }
  if (tensor->ndim > 0 && tensor->shape == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(arg_name, ": shape is NULL with ndim ", tensor->ndim));
  }
  absl::StatusOr<DataType> dtype = DataTypeFromDLPack(tensor->dtype);
  if (!dtype.ok()) return Annotate(dtype.status(), arg_name);
  absl::StatusOr<Device> device = DeviceFromDLPack(tensor->device);
  if (!device.ok()) return Annotate(device.status(), arg_name);

  std::vector<int64_t> shape(tensor->shape, tensor->shape + tensor->ndim);
  int64_t numel = 1;
  for (int i = 0; i < tensor->ndim; ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          arg_name, ": negative extent ", shape[i], " in dimension ", i));
    }
    if (shape[i] != 0 &&
        numel > std::numeric_limits<int64_t>::max() / shape[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat(arg_name, ": element count overflows int64"));
    }
    numel *= shape[i];
  }
  // Row-major check; extents of 1 may carry any stride (torch does this).
  if (tensor->strides != nullptr && numel > 0) {
    int64_t expected = 1;
    for (int i = tensor->ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && tensor->strides[i] != expected) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg_name, ": tensor is not contiguous (dimension ", i,
                         " has stride ", tensor->strides[i], ", expected ",
                         expected, "); make it contiguous before the call"));
      }
      expected *= shape[i];
    }
  }
  if (numel > kMaxBytes / static_cast<int64_t>(ElementSize(*dtype))) {
    return absl::InvalidArgumentError(absl::StrCat(
        arg_name, ": ", numel, " elements of ", DataTypeName(*dtype),
        " exceed the largest buffer a call accepts (", kMaxBytes, " bytes)"));
  }
  if (tensor->data == nullptr && numel > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(arg_name, ": data is NULL for ", numel, " elements"));
  }
  // An empty tensor may have no memory: its offset then points nowhere
  // (adding it to NULL is undefined), and nothing will read it.
  char* data = tensor->data == nullptr
                   ? nullptr
                   : static_cast<char*>(tensor->data) + tensor->byte_offset;
  TensorRef ref(data, std::move(shape), *dtype, *device);
  return ref;
}

absl::Status TensorRef::CheckSize(absl::string_view what) const {
  if (numel_ < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative element count ", numel_));
  }
  if (numel_ > kMaxBytes / static_cast<int64_t>(ElementSize(dtype_))) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", numel_, " elements of ", DataTypeName(dtype_),
        " exceed the largest buffer a call accepts (", kMaxBytes, " bytes)"));
  }
  return absl::OkStatus();
}

TensorRef TensorRef::Slice(int64_t offset, int64_t count) const {
  return TensorRef(static_cast<char*>(data_) +
                       static_cast<size_t>(offset) * ElementSize(dtype_),
                   count, dtype_, device_);
}

std::string TensorRef::DebugString() const {
  return absl::StrCat(DataTypeName(dtype_), "[", absl::StrJoin(shape_, ", "),
                      "] on ", device_.ToString());
}

}  // namespace distkit
