// libFuzzer target: the argument checks every tensor passes through the C ABI
// (TensorRef::FromDLPack: dtype, device, ndim, shape, strides, byte offset,
// size limits) and the reduction names and kinds. Whatever the fields, a
// check either refuses with a status or gives a view whose size arithmetic
// is exact and within TensorRef::kMaxBytes; it never crashes or overflows.
#include <dlpack/dlpack.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cc/core/data_type.h"
#include "cc/core/device.h"
#include "cc/core/reduce_op.h"
#include "cc/core/tensor_ref.h"

namespace {

[[noreturn]] void Broken(const char* what) {
  fprintf(stderr, "tensor check broken: %s\n", what);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  static char buffer[256];
  DLTensor t{};
  const int ndim = in.ConsumeIntegralInRange<int>(-2, 9);
  std::vector<int64_t> shape(ndim > 0 ? ndim : 0), strides(shape.size());
  for (int64_t& d : shape) {
    d = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-1, 8)
                         : in.ConsumeIntegral<int64_t>();
  }
  for (int64_t& s : strides) s = in.ConsumeIntegral<int64_t>();
  t.ndim = ndim;
  t.shape = in.ConsumeBool() || shape.empty() ? shape.data() : nullptr;
  t.strides = in.ConsumeBool() ? strides.data() : nullptr;
  t.dtype.code = in.ConsumeIntegral<uint8_t>();
  t.dtype.bits = in.ConsumeIntegral<uint8_t>();
  t.dtype.lanes = in.ConsumeIntegral<uint16_t>();
  // Any integer, as a C caller may store it (written without an enum cast).
  const int32_t device_type = in.ConsumeIntegral<int32_t>();
  std::memcpy(&t.device.device_type, &device_type, sizeof(device_type));
  t.device.device_id = in.ConsumeIntegral<int32_t>();
  t.data = in.ConsumeBool() ? buffer : nullptr;
  t.byte_offset = in.ConsumeIntegralInRange<uint64_t>(0, 64);

  absl::StatusOr<distkit::TensorRef> ref =
      distkit::TensorRef::FromDLPack(&t, "input");
  if (ref.ok()) {
    const int64_t elem = distkit::ElementSize(ref->dtype());
    if (ref->numel() < 0) Broken("negative numel");
    if (ref->numel() > distkit::TensorRef::kMaxBytes / elem)
      Broken("accepted a tensor over the size limit");
    if (ref->nbytes() != static_cast<size_t>(ref->numel() * elem))
      Broken("nbytes");
    if (ref->numel() > 0 && ref->data() == nullptr) Broken("NULL data");
    if (!ref->CheckSize("input").ok()) Broken("CheckSize refused a view");
    int64_t product = 1;
    for (int64_t d : ref->shape()) product *= d;  // fits: numel did
    if (product != ref->numel()) Broken("numel != product of the shape");
    const std::string text = ref->DebugString();
    if (text.empty()) Broken("DebugString");
  }
  // A shape given directly (C++ callers): overflow is -1, and refused.
  if (!shape.empty()) {
    distkit::TensorRef direct(buffer, shape, distkit::DataType::kFloat32);
    if (direct.numel() >= 0 && direct.CheckSize("direct").ok()) {
      if (direct.numel() > distkit::TensorRef::kMaxBytes / 4)
        Broken("direct view over the limit passed");
    }
  }
  const std::string op_name = in.ConsumeRandomLengthString(16);
  absl::StatusOr<distkit::ReduceOp> op = distkit::ParseReduceOp(op_name);
  if (op.ok()) {
    for (distkit::DataType dt : distkit::kAllDataTypes)
      (void)distkit::CheckReduceOpSupported(*op, dt);
  }
  return 0;
}
