// reduce_kernels_bench: the reduction loops of every instruction-set variant
// this CPU runs (cc/comm/reduce_kernels_isa.h), side by side in one run:
// out = a + b over buffers that stay in the core's caches (64 KiB) and that
// do not (64 MiB), for float32, bfloat16, float16 and int32, and the division
// a mean ends with (data /= 3). Prints CSV lines
//   reduce,<variant>,<dtype>,<bytes per buffer>,<GB/s of output>
//   divide,<variant>,<dtype>,<bytes>,<GB/s>
// where GB/s is bytes written per second (medians of 7 batches).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cc/comm/reduce_kernels_isa.h"
#include "cc/core/data_type.h"

namespace {

using Clock = std::chrono::steady_clock;

// Times `call(out, a, b, n)` over buffers of `bytes`.
template <typename Call>
double MedianGBs(Call call, size_t bytes, size_t elem) {
  std::vector<unsigned char> a(bytes), b(bytes), out(bytes);
  // Small finite values in every dtype (0x3c00 is 1.0 in float16, 0x3f80..
  // in bfloat16's high half, 1 in int32's low byte pattern): no NaN paths.
  for (size_t i = 0; i < bytes; i += 2) {
    a[i] = b[i] = 0x00;
    a[i + 1] = b[i + 1] = 0x3c;
  }
  const size_t n = bytes / elem;
  const int iters = static_cast<int>(std::max<size_t>(3, (256u << 20) / bytes));
  std::vector<double> gbs;
  for (int batch = 0; batch < 7; ++batch) {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      call(out.data(), a.data(), b.data(), n);
      __asm__ __volatile__("" : : "r"(out.data()) : "memory");
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    gbs.push_back(static_cast<double>(bytes) * iters / s / 1e9);
  }
  std::sort(gbs.begin(), gbs.end());
  return gbs[gbs.size() / 2];
}

}  // namespace

int main() {
  using distkit::DataType;
  for (const auto& v : distkit::comm_internal::ReduceKernelVariants()) {
    for (DataType dt : {DataType::kFloat32, DataType::kBFloat16,
                        DataType::kFloat16, DataType::kInt32}) {
      const distkit::ReduceFn fn = v.select(dt, distkit::ReduceOp::kSum);
      const std::string name(distkit::DataTypeName(dt));
      for (size_t bytes : {size_t{64} << 10, size_t{64} << 20}) {
        std::printf("reduce,%s,%s,%zu,%.2f\n", v.name, name.c_str(), bytes,
                    MedianGBs(fn, bytes, distkit::ElementSize(dt)));
        // Divides in place; the values shrink towards zero, through the
        // subnormals, as a mean's would not, which the conversions handle
        // at the same speed.
        auto divide = [&v, dt](void* out, const void*, const void*, size_t n) {
          v.divide(out, dt, n, 3);
        };
        std::printf("divide,%s,%s,%zu,%.2f\n", v.name, name.c_str(), bytes,
                    MedianGBs(divide, bytes, distkit::ElementSize(dt)));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
