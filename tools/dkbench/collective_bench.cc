// collective_bench: times distkit collectives in a job started by distrun.
// Sizes follow nccl-tests: `bytes` is the larger buffer (all_gather: the
// gathered output; reduce_scatter: the input). Rank 0 prints CSV lines
//   distkit,<op>,<world_size>,<bytes>,<microseconds per call>
// (distkit_mpi,... with --backend mpi under mpirun). --ops: all_reduce,
// all_gather, reduce_scatter, broadcast (the default), gather, scatter
// (root 0; `bytes` is the gathered output, the scattered input).
// Time per call is the median over batches of the mean of a batch.
// --dtype float32 (default), float16 or bfloat16: the element type (the
// buffers hold finite values of each).
// --touch 1: each call also writes its input before and reads its output
// after (touch.h), as in a training step.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"
#include "tools/dkbench/touch.h"

namespace {

using Clock = std::chrono::steady_clock;

int ItersFor(int64_t bytes) {
  return static_cast<int>(
      std::clamp<int64_t>(50'000'000 / std::max<int64_t>(bytes, 1), 5, 200));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace distkit;
  std::vector<std::string> ops = {"all_reduce", "all_gather", "reduce_scatter",
                                  "broadcast"};
  int64_t min_bytes = 4, max_bytes = 64 << 20;
  int batches = 5;
  std::string backend = "gloo";
  DataType dtype = DataType::kFloat32;
  bool touch = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--ops") ops = absl::StrSplit(value, ',');
    if (flag == "--min-bytes") (void)absl::SimpleAtoi(value, &min_bytes);
    if (flag == "--max-bytes") (void)absl::SimpleAtoi(value, &max_bytes);
    if (flag == "--batches") (void)absl::SimpleAtoi(value, &batches);
    if (flag == "--backend") backend = value;
    if (flag == "--touch") touch = value == "1";
    if (flag == "--dtype") {
      absl::StatusOr<DataType> parsed = ParseDataType(value);
      if (!parsed.ok() ||
          (*parsed != DataType::kFloat32 && *parsed != DataType::kFloat16 &&
           *parsed != DataType::kBFloat16)) {
        fprintf(stderr, "--dtype: float32, float16 or bfloat16\n");
        return 2;
      }
      dtype = *parsed;
    }
  }
  // --backend mpi: started by mpirun, no store (init_dist('mpi', 'mpi')).
  dist::InitOptions options;
  options.backend = backend;
  absl::Status init =
      dist::InitDist(backend == "mpi" ? "mpi" : "pytorch", options);
  if (!init.ok()) {
    fprintf(stderr, "%s\n", init.ToString().c_str());
    return 1;
  }
  ProcessGroup& g = *dist::GetDefaultGroup();
  const int n = g.size();
  for (const std::string& op : ops) {
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      const int64_t elem = static_cast<int64_t>(ElementSize(dtype));
      const int64_t count = std::max<int64_t>(1, bytes / elem);
      const int64_t part = std::max<int64_t>(1, count / n);
      int64_t a_count = count, b_count = 0;
      if (op == "all_gather") {
        a_count = part;
        b_count = part * n;
      } else if (op == "reduce_scatter" || op == "scatter") {
        a_count = part * n;
        b_count = part;
      } else if (op == "gather") {
        a_count = part;
        b_count = part * n;
      }
      // Every element 1.0 in the input, 0 in the output.
      std::vector<unsigned char> a(a_count * elem), b(b_count * elem, 0);
      const uint32_t one = dtype == DataType::kFloat32   ? 0x3f800000u
                           : dtype == DataType::kFloat16 ? 0x3c00u
                                                         : 0x3f80u;
      for (int64_t i = 0; i < a_count; ++i) {
        std::memcpy(a.data() + i * elem, &one, elem);  // little-endian
      }
      TensorRef ta(a.data(), a_count, dtype);
      TensorRef tb(b.data(), b_count, dtype);
      const uint32_t ones = elem == 4 ? one : one | one << 16;
      std::vector<unsigned char>& result = b_count > 0 ? b : a;
      volatile uint32_t sink = 0;
      auto call = [&]() -> absl::Status {
        if (op == "all_reduce") return g.AllReduce(ta, ReduceOp::kSum);
        if (op == "broadcast") return g.Broadcast(ta, 0);
        if (op == "all_gather") return g.AllGather(ta, tb);
        if (op == "gather") return g.Gather(ta, tb, 0);
        if (op == "scatter") return g.Scatter(ta, tb, 0);
        return g.ReduceScatter(ta, tb, ReduceOp::kSum);
      };
      auto run = [&]() -> absl::Status {
        if (!touch) return call();
        TouchWrite(a.data(), a.size(), ones);
        absl::Status s = call();
        sink = sink + TouchRead(result.data(), result.size());
        return s;
      };
      const int iters = ItersFor(bytes);
      for (int w = 0; w < 3; ++w) {
        if (!run().ok()) return 1;
      }
      std::vector<double> per_call;
      for (int batch = 0; batch < batches; ++batch) {
        if (!g.Barrier().ok()) return 1;
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) {
          absl::Status s = run();
          if (!s.ok()) {
            fprintf(stderr, "%s\n", s.ToString().c_str());
            return 1;
          }
        }
        per_call.push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0)
                .count() /
            iters);
      }
      // Rank 0's clock alone can flatter a broadcast root: take the slowest
      // rank's median, as nccl-tests reports the max across ranks.
      std::sort(per_call.begin(), per_call.end());
      double median = per_call[per_call.size() / 2];
      if (!g.AllReduce(TensorRef(&median, 1, DataType::kFloat64),
                       ReduceOp::kMax)
               .ok())
        return 1;
      if (g.rank() == 0) {
        printf("%s,%s,%d,%lld,%.3f\n",
               backend == "mpi" ? "distkit_mpi" : "distkit", op.c_str(), n,
               static_cast<long long>(bytes), median);
        fflush(stdout);
      }
    }
  }
  (void)g.Barrier();
  dist::DestroyDist();
  return 0;
}
