#include "cc/comm/reduce_kernels.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cc/comm/reduce_kernels_isa.h"
#include "cc/comm/reduce_loops.h"

namespace distkit {
namespace comm_internal {

ReduceFn SelectBaselineReduceLoop(DataType dtype, ReduceOp op) {
  return SelectReduceLoop(dtype, op);
}

void BaselineDivideBySize(void* data, DataType dtype, size_t n, int divisor) {
  DivideLoop(data, dtype, n, divisor);
}

std::vector<ReduceKernelVariant> ReduceKernelVariants() {
  std::vector<ReduceKernelVariant> variants = {
      {"baseline", &SelectBaselineReduceLoop, &BaselineDivideBySize}};
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's (and compiler-rt's) checks include whether the OS saves the
  // vector registers (XGETBV), not only the CPUID bits.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
    variants.push_back({"avx2", &SelectAvx2ReduceLoop, &Avx2DivideBySize});
    if (__builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq")) {
      variants.push_back(
          {"avx512", &SelectAvx512ReduceLoop, &Avx512DivideBySize});
    }
  }
#endif
  return variants;
}

}  // namespace comm_internal

namespace {

// The variant GetReduceFn and DivideBySize use: DISTKIT_REDUCE_ISA's if
// this CPU runs it, else the widest.
comm_internal::ReduceKernelVariant ChosenVariant() {
  const std::vector<comm_internal::ReduceKernelVariant> variants =
      comm_internal::ReduceKernelVariants();
  if (const char* want = std::getenv("DISTKIT_REDUCE_ISA")) {
    for (const comm_internal::ReduceKernelVariant& v : variants) {
      if (std::strcmp(v.name, want) == 0) return v;
    }
  }
  return variants.back();
}

}  // namespace

absl::StatusOr<ReduceFn> GetReduceFn(DataType dtype, ReduceOp op) {
  absl::Status supported = CheckReduceOpSupported(op, dtype);
  if (!supported.ok()) return supported;
  static const comm_internal::ReduceLoopSelector select =
      ChosenVariant().select;
  ReduceFn fn = select(dtype, op);
  if (fn == nullptr) return absl::InvalidArgumentError("unknown reduce op");
  return fn;
}

void DivideBySize(void* data, DataType dtype, size_t n, int divisor) {
  static const comm_internal::DivideLoopFn divide = ChosenVariant().divide;
  divide(data, dtype, n, divisor);
}

}  // namespace distkit
