// gpu_check: the GPU paths, built without Bazel (tools/gpu_check.sh) and run
// on a machine with an NVIDIA GPU. At world size 1 on cuda:0, through the
// collective contract (cc/group) as every group runs them:
//   1. every NCCL operation, for every dtype, against computed values, and
//      the reductions NCCL cannot express (refused, naming op and dtype);
//      what the contract's signature agreement costs on NCCL (a 4-byte
//      all_reduce with and without it);
//   2. device casting: host <-> CUDA copies (CopyBytes, DeviceBuffer) and a
//      round trip through an all_reduce, as mmengine's casting rule does;
//   3. an all_reduce bandwidth table (float32, 4 KiB .. 1 GiB).
// Without a usable GPU it says so and exits 0.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/comm/nccl/gpu_tensor_for_tests.h"
#include "cc/comm/nccl/nccl_backend.h"
#include "cc/core/device_copy.h"
#include "cc/group/collective_contract.h"
#include "cc/store/hash_store.h"

namespace distkit {
namespace {

int failures = 0;
void Check(bool ok, const std::string& what) {
  std::printf("  [%s] %s\n", ok ? " ok " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

OpContext Ctx(const char* op) {
  static uint64_t seq = 0;
  OpContext c;
  c.seq = ++seq;
  c.op_name = op;
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
    ok &= b.AllReduce(Ctx("all_reduce"), t.ref(), op).ok() && t.Read() == v;
  }
  Check(ok, "all_reduce sum/max/min/product/mean " + name);
  Gpu x(d, v);
  Check(b.Broadcast(Ctx("broadcast"), x.ref(), 0).ok() && x.Read() == v,
        "broadcast " + name);
  Gpu r(d, v);
  Check(
      b.Reduce(Ctx("reduce"), r.ref(), ReduceOp::kSum, 0).ok() && r.Read() == v,
      "reduce " + name);
  Gpu in(d, v), out(d, std::vector<double>(1000));
  Check(b.AllGather(Ctx("all_gather"), in.ref(), out.ref()).ok() &&
            out.Read() == v,
        "all_gather " + name);
  Gpu g(d, std::vector<double>(1000));
  Check(b.Gather(Ctx("gather"), in.ref(), g.ref(), 0).ok() && g.Read() == v,
        "gather " + name);
  Gpu s(d, std::vector<double>(1000));
  Check(b.Scatter(Ctx("scatter"), in.ref(), s.ref(), 0).ok() && s.Read() == v,
        "scatter " + name);
  Gpu rs(d, std::vector<double>(1000));
  Check(
      b.ReduceScatter(Ctx("reduce_scatter"), in.ref(), rs.ref(), ReduceOp::kSum)
              .ok() &&
          rs.Read() == v,
      "reduce_scatter " + name);
  Gpu a(d, std::vector<double>(1000));
  Check(b.AllToAll(Ctx("all_to_all"), in.ref(), {}, a.ref(), {}).ok() &&
            a.Read() == v,
        "all_to_all " + name);
  if (d == DataType::kInt32) {
    Gpu y(d, v);
    absl::Status st = b.AllReduce(Ctx("all_reduce"), y.ref(), ReduceOp::kBxor);
    Check(st.code() == absl::StatusCode::kInvalidArgument,
          "bxor refused: " + std::string(st.message()));
  }
}

}  // namespace
}  // namespace distkit

int main() {
  using namespace distkit;
  int version = 0;
  ncclGetVersion(&version);
  std::printf("gpu_check: NCCL %d, %d usable CUDA device(s)\n", version,
              CudaDeviceCount());
  if (CudaDeviceCount() == 0) {
    std::printf(
        "gpu_check: no usable GPU on this machine; nothing to run (the build "
        "succeeded)\n");
    return 0;
  }
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("gpu_check: cuda:0 is %s\n", prop.name);

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
  Check(b.Barrier(Ctx("barrier")).ok(), "barrier");
  auto split = b.Split(Ctx("new_group"), {0});
  Check(split.ok() && *split != nullptr, "ncclCommSplit subgroup");
  {
    // The agreement rides on the communicator: one staged ncclAllGather of
    // the 40-byte signatures before the operation's own kernel.
    Gpu word(DataType::kFloat32, std::vector<double>(1, 1.0));
    auto time_us = [&](bool agreed) {
      const int iters = 2000;
      for (int i = 0; i < 100; ++i) {
        (agreed ? b.AllReduce(Ctx("all_reduce"), word.ref(), ReduceOp::kSum)
                : raw->AllReduce(Ctx("all_reduce"), word.ref(), ReduceOp::kSum))
            .IgnoreError();
      }
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        (agreed ? b.AllReduce(Ctx("all_reduce"), word.ref(), ReduceOp::kSum)
                : raw->AllReduce(Ctx("all_reduce"), word.ref(), ReduceOp::kSum))
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
             Ctx("all_reduce"),
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

  std::printf("3. all_reduce bandwidth (float32, world size 1, cuda:0)\n");
  std::printf("  %12s %12s %10s\n", "bytes", "time (us)", "algbw GB/s");
  for (int64_t bytes = 4096; bytes <= (int64_t{1} << 30); bytes *= 4) {
    auto buf = DeviceBuffer::Allocate(Device::Cuda(0), bytes);
    if (!buf.ok()) break;
    TensorRef t(buf->data(), bytes / 4, DataType::kFloat32, Device::Cuda(0));
    for (int i = 0; i < 3; ++i)
      b.AllReduce(Ctx("all_reduce"), t, ReduceOp::kSum).IgnoreError();
    const int iters = bytes >= (int64_t{1} << 28) ? 5 : 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      b.AllReduce(Ctx("all_reduce"), t, ReduceOp::kSum).IgnoreError();
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start)
                          .count() /
                      iters;
    std::printf("  %12lld %12.1f %10.2f\n", (long long)bytes, us,
                bytes / us / 1e3);
  }
  std::printf("gpu_check: %s (%d failure(s))\n", failures ? "FAILED" : "passed",
              failures);
  return failures ? 1 : 0;
}
