// DlView: a contiguous torch tensor as the flat DLTensor the C ABI takes.
// Reductions need a dtype distkit reduces; data movement takes any dtype,
// sent as its bytes where distkit has no such dtype (int16, complex, ...).
// The DLTensor points into the view itself: build it where it is used.

#ifndef DISTKIT_BINDINGS_PYTHON_C10D_DL_VIEW_H_
#define DISTKIT_BINDINGS_PYTHON_C10D_DL_VIEW_H_

#include <ATen/core/Tensor.h>

#include <stdexcept>
#include <string>

#include "distkit/distkit.h"

namespace distkit {
namespace c10d_ext {

enum class DlUse { kReduce, kMove };

// distkit's DLPack dtype for `type`; false when distkit has none.
inline bool DlDtypeOf(at::ScalarType type, DLDataType* out) {
  switch (type) {
    case at::kHalf:
      *out = {kDLFloat, 16, 1};
      return true;
    case at::kBFloat16:
      *out = {kDLBfloat, 16, 1};
      return true;
    case at::kFloat:
      *out = {kDLFloat, 32, 1};
      return true;
    case at::kDouble:
      *out = {kDLFloat, 64, 1};
      return true;
    case at::kChar:
      *out = {kDLInt, 8, 1};
      return true;
    case at::kByte:
      *out = {kDLUInt, 8, 1};
      return true;
    case at::kInt:
      *out = {kDLInt, 32, 1};
      return true;
    case at::kLong:
      *out = {kDLInt, 64, 1};
      return true;
    case at::kBool:  // distkit's bool: DLPack 0.6 has no code for it
      *out = {kDLUInt, 1, 1};
      return true;
    default:
      return false;
  }
}

class DlView {
 public:
  // `t` must be contiguous (callers stage it) and on the CPU or a CUDA
  // device. Throws std::runtime_error naming `what` otherwise.
  DlView(const at::Tensor& t, DlUse use, const std::string& what) {
    if (!t.is_contiguous()) {
      throw std::runtime_error(what + ": internal: a non-contiguous tensor");
    }
    if (t.is_cpu()) {
      dl_.device = {kDLCPU, 0};
    } else if (t.is_cuda()) {
      dl_.device = {kDLCUDA, t.device().index()};
    } else {
      throw std::runtime_error(what + ": tensors on " + t.device().str() +
                               " are not supported (the CPU and CUDA are)");
    }
    shape_ = t.numel();
    if (!DlDtypeOf(t.scalar_type(), &dl_.dtype)) {
      if (use == DlUse::kReduce) {
        throw std::runtime_error(what + ": distkit cannot reduce " +
                                 std::string(c10::toString(t.scalar_type())));
      }
      dl_.dtype = {kDLUInt, 8, 1};  // its bytes
      scale_ = static_cast<int64_t>(t.element_size());
      shape_ *= scale_;
    }
    dl_.data = t.numel() > 0 ? t.data_ptr() : nullptr;
    dl_.ndim = 1;
    dl_.shape = &shape_;
    dl_.strides = nullptr;
    dl_.byte_offset = 0;
  }
  DlView(const DlView&) = delete;
  DlView& operator=(const DlView&) = delete;

  DLTensor* get() { return &dl_; }
  // Library elements per tensor element (1, or the element size when the
  // tensor travels as bytes).
  int64_t scale() const { return scale_; }

 private:
  DLTensor dl_{};
  int64_t shape_ = 0;
  int64_t scale_ = 1;
};

}  // namespace c10d_ext
}  // namespace distkit

#endif  // DISTKIT_BINDINGS_PYTHON_C10D_DL_VIEW_H_
