// collective_bench: times distkit collectives in a job started by distrun.
// Sizes follow nccl-tests: `bytes` is the larger buffer (all_gather: the
// gathered output; reduce_scatter: the input). Rank 0 prints CSV lines
//   distkit,<op>,<world_size>,<bytes>,<microseconds per call>
// (distkit_mpi,... with --backend mpi under mpirun). --ops: all_reduce,
// all_gather, reduce_scatter, broadcast (the default), gather, scatter
// (root 0; `bytes` is the gathered output, the scattered input), reduce
// (root 0), all_to_all (`bytes` each rank sends and receives, in equal
// parts) and barrier (no data: timed once, printed with `bytes` 0).
// Time per call is the median over batches of the mean of a batch.
// --dtype float32 (default), float16 or bfloat16: the element type (the
// buffers hold finite values of each).
// --touch 1: each call also writes its input before and reads its output
// after (touch.h), as in a training step.
// --without flight_recorder,agreement: the cost of safety features
// (safety_bench.py). Besides a baseline group, one group per feature is
// created with that feature off (DISTKIT_BENCH_WITHOUT, read at group
// creation, on top of what the process's own value turns off), and each
// round times one batch on every group, in an order that rotates; rank 0
// prints distkit,... for the baseline and distkit_without_<feature>,... per
// group, then per group the median over rounds of baseline / that group's
// time: ratio,<feature>,<op>,<world_size>,<bytes>,<ratio>. The feature
// "none" turns nothing off: its ratio is the noise of the measurement.

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
  std::vector<std::string> without;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--ops") ops = absl::StrSplit(value, ',');
    if (flag == "--min-bytes") (void)absl::SimpleAtoi(value, &min_bytes);
    if (flag == "--max-bytes") (void)absl::SimpleAtoi(value, &max_bytes);
    if (flag == "--batches") (void)absl::SimpleAtoi(value, &batches);
    if (flag == "--backend") backend = value;
    if (flag == "--touch") touch = value == "1";
    if (flag == "--without") without = absl::StrSplit(value, ',');
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
  const std::vector<std::string> known = {
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "gather",
      "scatter",    "reduce",     "all_to_all",     "barrier"};
  for (const std::string& op : ops) {
    if (std::find(known.begin(), known.end(), op) == known.end()) {
      fprintf(stderr,
              "--ops: unknown op '%s' (all_reduce, all_gather, "
              "reduce_scatter, broadcast, gather, scatter, reduce, "
              "all_to_all, barrier)\n",
              op.c_str());
      return 2;
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
  ProcessGroup& world = *dist::GetDefaultGroup();
  const int n = world.size();
  // The groups timed side by side: the world alone, or a baseline and one
  // per feature turned off, all over the same ranks.
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  std::vector<std::string> labels = {"distkit"};
  if (!without.empty()) {
    const char* env = std::getenv("DISTKIT_BENCH_WITHOUT");
    const std::string base = env != nullptr ? env : "";
    std::vector<int> all(n);
    for (int r = 0; r < n; ++r) all[r] = r;
    std::vector<std::string> specs = {base};
    for (const std::string& f : without) {
      // "none": a group like the baseline, the measurement's own noise.
      specs.push_back(f == "none" ? base : base.empty() ? f : base + "," + f);
      labels.push_back("distkit_without_" + f);
    }
    for (const std::string& spec : specs) {
      setenv("DISTKIT_BENCH_WITHOUT", spec.c_str(), 1);
      absl::StatusOr<std::shared_ptr<ProcessGroup>> made = world.NewGroup(all);
      if (!made.ok()) {
        fprintf(stderr, "%s\n", made.status().ToString().c_str());
        return 1;
      }
      groups.push_back(*made);
    }
    if (env != nullptr) {
      setenv("DISTKIT_BENCH_WITHOUT", base.c_str(), 1);
    } else {
      unsetenv("DISTKIT_BENCH_WITHOUT");
    }
  } else {
    groups.push_back(dist::GetDefaultGroup());
  }
  ProcessGroup& g = world;
  for (const std::string& op : ops) {
    // A barrier moves no data: one size, printed as 0 bytes.
    const bool barrier = op == "barrier";
    for (int64_t bytes = barrier ? 0 : min_bytes;
         barrier ? bytes == 0 : bytes <= max_bytes;
         bytes = barrier ? 1 : bytes * 4) {
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
      } else if (op == "all_to_all") {
        a_count = part * n;
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
      ProcessGroup* on = groups[0].get();
      auto call = [&]() -> absl::Status {
        ProcessGroup& pg = *on;
        if (op == "all_reduce") return pg.AllReduce(ta, ReduceOp::kSum);
        if (op == "broadcast") return pg.Broadcast(ta, 0);
        if (op == "all_gather") return pg.AllGather(ta, tb);
        if (op == "gather") return pg.Gather(ta, tb, 0);
        if (op == "scatter") return pg.Scatter(ta, tb, 0);
        if (op == "reduce") return pg.Reduce(ta, ReduceOp::kSum, 0);
        if (op == "all_to_all") return pg.AllToAll(ta, tb);
        if (op == "barrier") return pg.Barrier();
        return pg.ReduceScatter(ta, tb, ReduceOp::kSum);
      };
      auto run = [&]() -> absl::Status {
        if (!touch) return call();
        TouchWrite(a.data(), a.size(), ones);
        absl::Status s = call();
        sink = sink + TouchRead(result.data(), result.size());
        return s;
      };
      const int iters = ItersFor(bytes);
      const size_t k = groups.size();
      for (size_t j = 0; j < k; ++j) {
        on = groups[j].get();
        for (int w = 0; w < 3; ++w) {
          if (!run().ok()) return 1;
        }
      }
      // per_call[j][batch]: group j's time per call in round `batch`.
      std::vector<std::vector<double>> per_call(k);
      for (int batch = 0; batch < batches; ++batch) {
        for (size_t step = 0; step < k; ++step) {
          const size_t j = (batch + step) % k;  // no group always first
          on = groups[j].get();
          if (!on->Barrier().ok()) return 1;
          const auto t0 = Clock::now();
          for (int i = 0; i < iters; ++i) {
            absl::Status s = run();
            if (!s.ok()) {
              fprintf(stderr, "%s\n", s.ToString().c_str());
              return 1;
            }
          }
          per_call[j].push_back(
              std::chrono::duration<double, std::micro>(Clock::now() - t0)
                  .count() /
              iters);
        }
      }
      // Rank 0's clock alone can flatter a broadcast root: take the slowest
      // rank's median, as nccl-tests reports the max across ranks. With
      // groups side by side, also each round's baseline / group time (both
      // the slowest rank's), and their median.
      std::vector<double> medians(2 * k - 1);
      for (size_t j = 0; j < k; ++j) {
        std::vector<double> sorted = per_call[j];
        std::sort(sorted.begin(), sorted.end());
        medians[j] = sorted[sorted.size() / 2];
      }
      std::vector<double> slowest(k * batches);
      for (size_t j = 0; j < k; ++j) {
        for (int b = 0; b < batches; ++b)
          slowest[j * batches + b] = per_call[j][b];
      }
      if (!g.AllReduce(TensorRef(medians.data(), k, DataType::kFloat64),
                       ReduceOp::kMax)
               .ok() ||
          !g.AllReduce(
                TensorRef(slowest.data(), slowest.size(), DataType::kFloat64),
                ReduceOp::kMax)
               .ok())
        return 1;
      for (size_t j = 1; j < k; ++j) {
        std::vector<double> ratios(batches);
        for (int b = 0; b < batches; ++b) {
          ratios[b] = slowest[b] / slowest[j * batches + b];
        }
        std::sort(ratios.begin(), ratios.end());
        medians[k + j - 1] = ratios[batches / 2];
      }
      if (g.rank() == 0) {
        for (size_t j = 0; j < k; ++j) {
          printf("%s,%s,%d,%lld,%.3f\n",
                 backend == "mpi" && j == 0 ? "distkit_mpi" : labels[j].c_str(),
                 op.c_str(), n, static_cast<long long>(bytes), medians[j]);
        }
        for (size_t j = 1; j < k; ++j) {
          printf("ratio,%s,%s,%d,%lld,%.4f\n", without[j - 1].c_str(),
                 op.c_str(), n, static_cast<long long>(bytes),
                 medians[k + j - 1]);
        }
        fflush(stdout);
      }
    }
  }
  (void)g.Barrier();
  groups.clear();
  dist::DestroyDist();
  return 0;
}
