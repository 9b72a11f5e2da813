// gpu_check: the GPU paths, built without Bazel (tools/gpu_check.sh) and run
// on a machine with an NVIDIA GPU. At world size 1 on cuda:0, through the
// collective contract (cc/group) as every group runs them:
//   1. every NCCL operation, for every dtype, against computed values, and
//      the reductions NCCL cannot express (refused, naming op and dtype);
//      what the contract's signature agreement costs on NCCL (a 4-byte
//      all_reduce with and without it);
//   2. device casting: host <-> CUDA copies (CopyBytes, DeviceBuffer) and a
//      round trip through an all_reduce, as mmengine's casting rule does;
//   3. the GradReducer with CUDA parameters on an NCCL group: buckets in
//      device memory, the mean by ncclAvg, the fp16 hook staged through the
//      host, a host gradient refused;
//   4. an all_reduce bandwidth table (float32, 4 KiB .. 1 GiB) beside raw
//      ncclAllReduce calls on a communicator of this program's own, with the
//      distkit / raw time ratio.
// One PASS / FAIL line per check and a final count; exit 1 on any FAIL.
// Without a usable GPU it says so and exits 0.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/nccl/nccl_backend.h"
#include "cc/core/device_copy.h"
#include "cc/core/half.h"
#include "cc/group/collective_contract.h"
#include "cc/group/process_group.h"
#include "cc/parallel/grad_reducer.h"
#include "cc/store/hash_store.h"
#include "testing/cc/gpu_tensor.h"

namespace distkit {
namespace {

int failures = 0, passes = 0;
void Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  ++(ok ? passes : failures);
}

OpContext Ctx(OpCode op) {
  static uint64_t seq = 0;
  OpContext c;
  c.seq = ++seq;
  c.op = op;
  c.group_name = "gpu_check";
  c.timeout = absl::Seconds(60);
  return c;
}

using Gpu = GpuTensor;

std::vector<double> Values(int64_t n, double scale = 1) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = scale * ((i % 7) + 1);
  return v;
}

void EveryOp(CollectiveContract& b, DataType d) {
  const std::string name(DataTypeName(d));
  const auto v = Values(1000);
  bool ok = true;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin,
                      ReduceOp::kProduct, ReduceOp::kMean}) {
    Gpu t(d, v);
    ok &=
        b.AllReduce(Ctx(OpCode::kAllReduce), t.ref(), op).ok() && t.Read() == v;
  }
  Check(ok, "all_reduce sum/max/min/product/mean " + name);
  Gpu x(d, v);
  Check(b.Broadcast(Ctx(OpCode::kBroadcast), x.ref(), 0).ok() && x.Read() == v,
        "broadcast " + name);
  Gpu r(d, v);
  Check(b.Reduce(Ctx(OpCode::kReduce), r.ref(), ReduceOp::kSum, 0).ok() &&
            r.Read() == v,
        "reduce " + name);
  Gpu in(d, v), out(d, std::vector<double>(1000));
  Check(b.AllGather(Ctx(OpCode::kAllGather), in.ref(), out.ref()).ok() &&
            out.Read() == v,
        "all_gather " + name);
  Gpu g(d, std::vector<double>(1000));
  Check(b.Gather(Ctx(OpCode::kGather), in.ref(), g.ref(), 0).ok() &&
            g.Read() == v,
        "gather " + name);
  Gpu s(d, std::vector<double>(1000));
  Check(b.Scatter(Ctx(OpCode::kScatter), in.ref(), s.ref(), 0).ok() &&
            s.Read() == v,
        "scatter " + name);
  Gpu rs(d, std::vector<double>(1000));
  Check(b.ReduceScatter(Ctx(OpCode::kReduceScatter), in.ref(), rs.ref(),
                        ReduceOp::kSum)
                .ok() &&
            rs.Read() == v,
        "reduce_scatter " + name);
  Gpu a(d, std::vector<double>(1000));
  Check(b.AllToAll(Ctx(OpCode::kAllToAll), in.ref(), {}, a.ref(), {}).ok() &&
            a.Read() == v,
        "all_to_all " + name);
  if (d == DataType::kInt32) {
    Gpu y(d, v);
    absl::Status st =
        b.AllReduce(Ctx(OpCode::kAllReduce), y.ref(), ReduceOp::kBxor);
    Check(st.code() == absl::StatusCode::kInvalidArgument,
          "bxor refused: " + std::string(st.message()));
  }
}

// Section 3: the GradReducer over an NCCL group with CUDA parameters.
void ReducerOnCuda() {
  GroupOptions options;
  options.backend = "nccl";
  options.timeout = absl::Seconds(60);
  auto world =
      ProcessGroup::CreateWorld(std::make_shared<HashStore>(), 0, 1, options);
  Check(world.ok(), "an nccl ProcessGroup: " + world.status().ToString());
  if (!world.ok()) return;
  Check((*world)->comm_device() == Device::Cuda(0),
        "its comm device is cuda:0");
  const std::vector<int64_t> sizes = {1000, 37, 4096};
  for (CommHook hook : {CommHook::kNone, CommHook::kFp16Compress}) {
    const std::string what = hook == CommHook::kNone ? "GradReducer on cuda:0"
                                                     : "fp16 hook on cuda:0";
    std::vector<Gpu> params, grads;
    std::vector<GradReducer::Parameter> ps;
    for (size_t p = 0; p < sizes.size(); ++p) {
      params.emplace_back(DataType::kFloat32, Values(sizes[p], p + 1));
      grads.emplace_back(DataType::kFloat32, Values(sizes[p], 0.37 * (p + 1)));
    }
    for (size_t p = 0; p < sizes.size(); ++p) {
      ps.push_back({params[p].ref(), absl::StrCat("p", p)});
    }
    GradReducer::Options o;
    o.comm_hook = hook;
    o.first_bucket_cap_mb = 4096.0 / (1 << 20);
    auto r = GradReducer::Create(*world, ps, {}, o);
    Check(r.ok(), what + ": create: " + r.status().ToString());
    if (!r.ok()) continue;
    bool ok = true;
    for (int it = 0; it < 2; ++it) {
      for (int p = static_cast<int>(sizes.size()) - 1; p >= 0; --p) {
        ok &= (*r)->MarkReady(p, grads[p].ref()).ok();
      }
      ok &= (*r)->Finalize().ok();
    }
    // World size 1: the mean is the gradient itself (after the fp16 round
    // trip with the hook).
    for (size_t p = 0; p < sizes.size(); ++p) {
      std::vector<double> want = Values(sizes[p], 0.37 * (p + 1));
      if (hook == CommHook::kFp16Compress) {
        for (double& w : want) {
          w = comm_internal::Float16ToFloat(
              comm_internal::FloatToFloat16(static_cast<float>(w)));
        }
      }
      const std::vector<double> got = grads[p].Read();
      for (size_t k = 0; k < got.size(); ++k) {
        ok &= std::abs(got[k] - want[k]) <=
              1e-6 * std::max(1.0, std::abs(want[k]));
      }
    }
    Check(ok, what + ": two iterations (with the rebuild) average correctly");
    auto reduced = (*r)->ReducedGrad(0);
    Check(reduced.ok() && reduced->device() == Device::Cuda(0),
          what + ": buckets are device memory");
  }
  std::vector<float> host(8, 1.0f);
  Gpu param(DataType::kFloat32, std::vector<double>(8, 1.0));
  auto r = GradReducer::Create(*world, {{param.ref(), "w"}}, {}, {});
  if (r.ok()) {
    absl::Status s = (*r)->MarkReady(
        0, TensorRef(host.data(), host.size(), DataType::kFloat32));
    Check(absl::IsInvalidArgument(s),
          "a host gradient for a CUDA parameter is refused: " + s.ToString());
  }
}

// Section 4's reference: ncclAllReduce on this program's own communicator.
double RawNcclMicros(ncclComm_t comm, cudaStream_t stream, void* buf,
                     size_t count, int iters) {
  for (int i = 0; i < 3; ++i) {
    ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream);
  }
  cudaStreamSynchronize(stream);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, stream);
    cudaStreamSynchronize(stream);  // distkit waits for each op too
  }
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - start)
             .count() /
         iters;
}

}  // namespace
}  // namespace distkit

// The exit status of a run that checked nothing (automake's "skipped").
constexpr int kSkipped = 77;

int main() {
  using namespace distkit;
  int version = 0;
  ncclGetVersion(&version);
  std::printf("gpu_check: NCCL %d, %d usable CUDA device(s)\n", version,
              CudaDeviceCount());
  if (CudaDeviceCount() == 0) {
    std::printf(
        "SKIPPED every C++ GPU check: no usable GPU on this machine (%s); the "
        "build succeeded\n",
        std::string(CudaUsable().message()).c_str());
    return kSkipped;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("gpu_check: cuda:0 is %s\n", prop.name);
  RegisterBackend(
      "nccl",
      [](const BackendConfig& c) -> absl::StatusOr<std::unique_ptr<Backend>> {
        auto b = NcclBackend::Create(c);
        if (!b.ok()) return b.status();
        return std::unique_ptr<Backend>(*std::move(b));
      },
      NcclBackend::CanRun);

  std::printf("1. every NCCL operation at world size 1\n");
  BackendConfig config;
  config.store = std::make_shared<HashStore>();
  config.timeout = absl::Seconds(60);
  auto backend = NcclBackend::Create(config);
  Check(backend.ok(), "ncclCommInitRank: " + backend.status().ToString());
  if (!backend.ok()) return 1;
  NcclBackend* raw = backend->get();
  CollectiveContract b(*std::move(backend));
  for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                     DataType::kBFloat16, DataType::kInt32, DataType::kInt64,
                     DataType::kInt8, DataType::kUInt8}) {
    EveryOp(b, d);
  }
  Check(b.Barrier(Ctx(OpCode::kBarrier)).ok(), "barrier");
  auto split = b.Split(Ctx(OpCode::kNewGroup), {0});
  Check(split.ok() && *split != nullptr, "ncclCommSplit subgroup");
  {
    // The agreement rides on the communicator: one staged ncclAllGather of
    // the 40-byte signatures before the operation's own kernel.
    Gpu word(DataType::kFloat32, std::vector<double>(1, 1.0));
    auto time_us = [&](bool agreed) {
      const int iters = 2000;
      for (int i = 0; i < 100; ++i) {
        (agreed
             ? b.AllReduce(Ctx(OpCode::kAllReduce), word.ref(), ReduceOp::kSum)
             : raw->AllReduce(Ctx(OpCode::kAllReduce), word.ref(),
                              ReduceOp::kSum))
            .IgnoreError();
      }
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        (agreed
             ? b.AllReduce(Ctx(OpCode::kAllReduce), word.ref(), ReduceOp::kSum)
             : raw->AllReduce(Ctx(OpCode::kAllReduce), word.ref(),
                              ReduceOp::kSum))
            .IgnoreError();
      }
      return std::chrono::duration<double, std::micro>(
                 std::chrono::steady_clock::now() - start)
                 .count() /
             iters;
    };
    const double bare = time_us(false), agreed = time_us(true);
    std::printf(
        "  4-byte all_reduce: %.1f us with the signature agreement, %.1f us "
        "without (agreement %.1f us)\n",
        agreed, bare, agreed - bare);
    Check(agreed > 0 && bare > 0, "agreement latency measured");
  }

  std::printf("2. device casting\n");
  std::vector<float> host = {1.5f, -2.f, 3.25f}, back(3);
  auto dev = DeviceBuffer::Allocate(Device::Cuda(0), 12);
  Check(dev.ok(), "cudaMalloc through DeviceBuffer");
  Check(CopyBytes(dev->data(), Device::Cuda(0), host.data(), Device::Cpu(), 12)
            .ok(),
        "host -> cuda:0");
  Check(b.AllReduce(
             Ctx(OpCode::kAllReduce),
             TensorRef(dev->data(), 3, DataType::kFloat32, Device::Cuda(0)),
             ReduceOp::kSum)
            .ok(),
        "all_reduce on the cast copy");
  Check(CopyBytes(back.data(), Device::Cpu(), dev->data(), Device::Cuda(0), 12)
                .ok() &&
            back == host,
        "cuda:0 -> host, values intact");
  Check(
      b.CheckDevice(Device::Cpu()).code() == absl::StatusCode::kInvalidArgument,
      "a CPU tensor is refused by the nccl backend");

  std::printf("3. the GradReducer with CUDA parameters on an NCCL group\n");
  ReducerOnCuda();

  std::printf(
      "4. all_reduce bandwidth (float32, world size 1, cuda:0), distkit "
      "beside raw NCCL\n");
  ncclUniqueId id;
  ncclComm_t raw_comm = nullptr;
  cudaStream_t raw_stream = nullptr;
  const bool have_raw = ncclGetUniqueId(&id) == ncclSuccess &&
                        ncclCommInitRank(&raw_comm, 1, id, 0) == ncclSuccess &&
                        cudaStreamCreate(&raw_stream) == cudaSuccess;
  Check(have_raw, "a raw NCCL communicator for the reference");
  std::printf("  %12s %12s %12s %10s %12s\n", "bytes", "distkit us", "raw us",
              "algbw GB/s", "distkit/raw");
  const int64_t max_bytes = std::getenv("GPU_CHECK_QUICK") != nullptr
                                ? (int64_t{1} << 24)
                                : (int64_t{1} << 30);
  for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    auto buf = DeviceBuffer::Allocate(Device::Cuda(0), bytes);
    if (!buf.ok()) break;
    TensorRef t(buf->data(), bytes / 4, DataType::kFloat32, Device::Cuda(0));
    for (int i = 0; i < 3; ++i)
      b.AllReduce(Ctx(OpCode::kAllReduce), t, ReduceOp::kSum).IgnoreError();
    const int iters = bytes >= (int64_t{1} << 28) ? 5 : 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      b.AllReduce(Ctx(OpCode::kAllReduce), t, ReduceOp::kSum).IgnoreError();
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start)
                          .count() /
                      iters;
    const double raw_us =
        have_raw
            ? RawNcclMicros(raw_comm, raw_stream, buf->data(), bytes / 4, iters)
            : 0;
    std::printf("  %12lld %12.1f %12.1f %10.2f %12.2f\n", (long long)bytes, us,
                raw_us, bytes / us / 1e3, raw_us > 0 ? us / raw_us : 0.0);
  }
  if (raw_comm != nullptr) ncclCommDestroy(raw_comm);
  std::printf("gpu_check: %d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}
