// The NCCL backend at world size 1 on cuda:0: every operation against
// computed values for every dtype, the reductions NCCL cannot express, the
// casting rule (a CPU tensor through an NCCL group), the cpu:gloo,cuda:nccl
// dispatch and abort. Without a usable GPU it checks that creating an NCCL
// group fails with a clear message, says it was skipped, and passes.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/internal/half.h"
#include "cc/core/device_copy.h"
#include "cc/dist/collectives.h"
#include "cc/dist/dist.h"
#include "cc/dist/process_group.h"
#include "cc/store/hash_store.h"

namespace distkit {
namespace {

int failures = 0;
void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

// A float vector stored on cuda:0 in `dtype`.
struct Gpu {
  DataType dtype;
  int64_t n;
  DeviceBuffer buf;
  Gpu(DataType d, const std::vector<double>& v) : dtype(d), n(v.size()) {
    buf = *DeviceBuffer::Allocate(Device::Cuda(0), n * 8 + 8);
    std::vector<char> host(n * ElementSize(d));
    for (int64_t i = 0; i < n; ++i) Put(host.data(), i, v[i]);
    Check(CopyBytes(buf.data(), Device::Cuda(0), host.data(), Device::Cpu(),
                    host.size())
              .ok(),
          "upload");
  }
  TensorRef ref() { return TensorRef(buf.data(), n, dtype, Device::Cuda(0)); }
  std::vector<double> Read() {
    std::vector<char> host(n * ElementSize(dtype));
    Check(CopyBytes(host.data(), Device::Cpu(), buf.data(), Device::Cuda(0),
                    host.size())
              .ok(),
          "download");
    std::vector<double> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = Get(host.data(), i);
    return out;
  }
  void Put(char* p, int64_t i, double v) {
    switch (dtype) {
      case DataType::kFloat32:
        reinterpret_cast<float*>(p)[i] = v;
        break;
      case DataType::kFloat64:
        reinterpret_cast<double*>(p)[i] = v;
        break;
      case DataType::kInt32:
        reinterpret_cast<int32_t*>(p)[i] = v;
        break;
      case DataType::kInt64:
        reinterpret_cast<int64_t*>(p)[i] = v;
        break;
      case DataType::kInt8:
        reinterpret_cast<int8_t*>(p)[i] = v;
        break;
      case DataType::kUInt8:
        reinterpret_cast<uint8_t*>(p)[i] = v;
        break;
      case DataType::kFloat16:
        reinterpret_cast<uint16_t*>(p)[i] = comm_internal::FloatToFloat16(v);
        break;
      case DataType::kBFloat16:
        reinterpret_cast<uint16_t*>(p)[i] = comm_internal::FloatToBFloat16(v);
        break;
      default:
        break;
    }
  }
  double Get(const char* p, int64_t i) {
    switch (dtype) {
      case DataType::kFloat32:
        return reinterpret_cast<const float*>(p)[i];
      case DataType::kFloat64:
        return reinterpret_cast<const double*>(p)[i];
      case DataType::kInt32:
        return reinterpret_cast<const int32_t*>(p)[i];
      case DataType::kInt64:
        return reinterpret_cast<const int64_t*>(p)[i];
      case DataType::kInt8:
        return reinterpret_cast<const int8_t*>(p)[i];
      case DataType::kUInt8:
        return reinterpret_cast<const uint8_t*>(p)[i];
      case DataType::kFloat16:
        return comm_internal::Float16ToFloat(
            reinterpret_cast<const uint16_t*>(p)[i]);
      case DataType::kBFloat16:
        return comm_internal::BFloat16ToFloat(
            reinterpret_cast<const uint16_t*>(p)[i]);
      default:
        return 0;
    }
  }
};

std::vector<double> Values(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = (i % 7) + 1;
  return v;
}

void EveryOp(ProcessGroup& g, DataType d) {
  const std::string name(DataTypeName(d));
  const auto v = Values(37);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin,
                      ReduceOp::kProduct, ReduceOp::kMean}) {
    Gpu t(d, v);
    absl::Status s = g.AllReduce(t.ref(), op);
    Check(s.ok(), absl::StrCat("all_reduce ", ReduceOpName(op), " ", name, ": ",
                               s.ToString()));
    Check(t.Read() == v,
          "all_reduce at world size 1 keeps the values: " + name);
  }
  Gpu b(d, v);
  Check(g.Broadcast(b.ref(), 0).ok() && b.Read() == v, "broadcast " + name);
  Gpu r(d, v);
  Check(g.Reduce(r.ref(), ReduceOp::kSum, 0).ok() && r.Read() == v,
        "reduce " + name);
  Gpu in(d, v), out(d, std::vector<double>(37, 0));
  Check(g.AllGather(in.ref(), out.ref()).ok() && out.Read() == v,
        "all_gather " + name);
  Gpu gout(d, std::vector<double>(37, 0));
  Check(g.Gather(in.ref(), gout.ref(), 0).ok() && gout.Read() == v,
        "gather " + name);
  Gpu sout(d, std::vector<double>(37, 0));
  Check(g.Scatter(in.ref(), sout.ref(), 0).ok() && sout.Read() == v,
        "scatter " + name);
  Gpu rs(d, std::vector<double>(37, 0));
  Check(g.ReduceScatter(in.ref(), rs.ref(), ReduceOp::kSum).ok() &&
            rs.Read() == v,
        "reduce_scatter " + name);
  Gpu a2a(d, std::vector<double>(37, 0));
  Check(g.AllToAll(in.ref(), a2a.ref()).ok() && a2a.Read() == v,
        "all_to_all " + name);
  if (d == DataType::kInt32) {
    Gpu x(d, v);
    absl::Status s = g.AllReduce(x.ref(), ReduceOp::kBxor);
    Check(s.code() == absl::StatusCode::kInvalidArgument &&
              s.message().find("bxor") != std::string::npos,
          "bxor is refused, naming the op: " + s.ToString());
  }
}

}  // namespace
}  // namespace distkit

int main() {
  using namespace distkit;
  Check(FindBackend("nccl") != nullptr &&
            FindBackend("cpu:gloo,cuda:nccl") != nullptr,
        "nccl backends registered");
  dist::InitOptions options;
  options.backend = "nccl";
  options.timeout = absl::Seconds(60);
  if (CudaDeviceCount() == 0) {
    absl::Status s =
        dist::InitDistWithStore(std::make_shared<HashStore>(), 0, 1, options);
    Check(s.code() == absl::StatusCode::kFailedPrecondition &&
              s.message().find("needs a CUDA GPU") != std::string::npos,
          "without a GPU, an nccl group is refused clearly: " + s.ToString());
    std::printf(
        "skipped: no usable CUDA GPU on this machine (the NCCL backend "
        "built and linked; %s)\n",
        failures ? "FAILED" : "refused cleanly");
    return failures ? 1 : 0;
  }
  absl::Status s =
      dist::InitDistWithStore(std::make_shared<HashStore>(), 0, 1, options);
  Check(s.ok(), "init nccl: " + s.ToString());
  if (!s.ok()) return 1;
  auto world = dist::GetDefaultGroup();
  Check(world->comm_device() == Device::Cuda(0) &&
            dist::GetDevice() == Device::Cuda(0),
        "comm device and get_device");
  for (DataType d : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                     DataType::kBFloat16, DataType::kInt32, DataType::kInt64,
                     DataType::kInt8, DataType::kUInt8}) {
    EveryOp(*world, d);
  }
  Check(world->Barrier().ok(), "barrier");
  // Casting: a CPU tensor through the NCCL group goes to cuda:0 and back.
  std::vector<float> host = {1.5f, -2.f, 3.f};
  s = dist::AllReduce(TensorRef(host.data(), 3, DataType::kFloat32), "sum");
  Check(s.ok() && host[0] == 1.5f && host[2] == 3.f,
        "casting cpu -> cuda -> cpu: " + s.ToString());
  Check(world->AllReduce(TensorRef(host.data(), 3, DataType::kFloat32),
                         ReduceOp::kSum)
                .code() == absl::StatusCode::kInvalidArgument,
        "a CPU tensor straight to the nccl group is refused");
  // Dispatch by device.
  GroupOptions dispatch;
  dispatch.backend = "cpu:gloo,cuda:nccl";
  auto both = world->NewGroup({0}, dispatch);
  Check(both.ok(), "cpu:gloo,cuda:nccl group: " + both.status().ToString());
  if (both.ok()) {
    Check((*both)
              ->AllReduce(TensorRef(host.data(), 3, DataType::kFloat32),
                          ReduceOp::kSum)
              .ok(),
          "dispatch: cpu tensor to gloo");
    Gpu t(DataType::kFloat32, Values(5));
    Check((*both)->AllReduce(t.ref(), ReduceOp::kSum).ok(),
          "dispatch: cuda tensor to nccl");
  }
  // Abort: later calls fail cleanly.
  auto sub = world->NewGroup({0});
  Check(sub.ok(), "ncclCommSplit subgroup");
  if (sub.ok()) {
    (*sub)->Abort();
    Gpu t(DataType::kFloat32, Values(5));
    Check(!(*sub)->AllReduce(t.ref(), ReduceOp::kSum).ok(),
          "aborted group refuses work");
  }
  dist::DestroyDist();
  std::printf("%s: every NCCL operation at world size 1 on cuda:0\n",
              failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
