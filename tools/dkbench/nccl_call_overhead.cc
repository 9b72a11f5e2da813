// What an asynchronous NCCL operation costs the thread that issues it: the
// wall time of ProcessGroup::AllReduceAsync (argument checks, the issue mark
// on the caller's stream, queueing) beside the raw ncclAllReduce it wraps on
// a communicator of this program's own, median of many calls after warm-up,
// at 4 B and 64 MiB; and the device allocations per operation after warm-up.
// Made for the CUDA + NCCL simulator with its delays off (the numbers are
// host-side costs; the simulator counts allocations), and runs unchanged on
// GPUs:
//
//   DKSIM_MAX_DELAY_US=0 DKSIM_DEVICES=2 \
//   DISTKIT_CUDART_LIBRARY=bazel-bin/testing/gpu_sim/libdkgpusim.so \
//   DISTKIT_NCCL_LIBRARY=bazel-bin/testing/gpu_sim/libdkgpusim.so \
//   bazel-bin/tools/distrun/distrun --nproc-per-node 2 -- \
//     bazel-bin/tools/dkbench/nccl_call_overhead [calls]
//
// Rank 0 prints one line per size.

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cc/comm/nccl/nccl_comm.h"
#include "cc/comm/nccl/nccl_library.h"
#include "cc/core/cuda_library.h"
#include "cc/core/device_copy.h"
#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"
#include "testing/cc/dist_job.h"

namespace distkit {
namespace {

double Micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The simulator's allocation counter, or -1 on a real GPU.
long DeviceAllocations(int device) {
  const char* path = std::getenv("DISTKIT_CUDART_LIBRARY");
  void* sim = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  void* f = sim != nullptr ? dlsym(sim, "dksimMallocCount") : nullptr;
  return f != nullptr ? reinterpret_cast<long (*)(int)>(f)(device) : -1;
}

int Run(int calls) {
  std::shared_ptr<ProcessGroup> world = dist::GetDefaultGroup();
  const int rank = world->rank(), size = world->size();
  const Device device = world->comm_device();
  const CudaLibrary& cuda = **LoadCudaLibrary();
  const NcclLibrary& nccl = **LoadNcclLibrary();
  cuda.SetDevice(device.index);
  // The raw side: a blocking communicator of our own, its own stream.
  ncclUniqueId id;
  if (rank == 0) {
    nccl.GetUniqueId(&id);
    if (!world->store()
             ->Set("raw_id", std::string(id.internal, sizeof(id)))
             .ok())
      return 1;
  } else {
    absl::StatusOr<std::string> got =
        world->store()->Get("raw_id", absl::Seconds(60));
    if (!got.ok()) return 1;
    std::memcpy(id.internal, got->data(), sizeof(id.internal));
  }
  ncclComm_t raw;
  if (nccl.CommInitRank(&raw, size, id, rank) != ncclSuccess) return 1;
  cudaStream_t stream;
  cuda.StreamCreateWithFlags(&stream, cudaStreamNonBlocking);

  for (size_t bytes : {size_t{4}, size_t{64} << 20}) {
    const int n = bytes == 4 ? calls : std::max(calls / 200, 20);
    absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Allocate(device, bytes);
    if (!buf.ok()) return 1;
    TensorRef t(buf->data(), static_cast<int64_t>(bytes / 4),
                DataType::kFloat32, device);
    std::vector<double> ours, theirs;
    long allocations = 0;
    for (int warm = 1; warm >= 0; --warm) {
      const int count = warm ? std::min(n, 100) : n;
      const long before = DeviceAllocations(device.index);
      for (int i = 0; i < count; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        std::shared_ptr<Work> w = world->AllReduceAsync(t, ReduceOp::kSum);
        const auto t1 = std::chrono::steady_clock::now();
        if (!w->Wait().ok()) return 1;
        const auto t2 = std::chrono::steady_clock::now();
        nccl.AllReduce(t.data(), t.data(), t.numel(), ncclFloat, ncclSum, raw,
                       stream);
        const auto t3 = std::chrono::steady_clock::now();
        cuda.StreamSynchronize(stream);
        if (!warm) {
          ours.push_back(Micros(t1 - t0));
          theirs.push_back(Micros(t3 - t2));
        }
      }
      if (!warm) allocations = DeviceAllocations(device.index) - before;
    }
    if (rank == 0) {
      std::printf(
          "all_reduce %9zu B, world size %d, %d calls: issuing thread %.2f us "
          "(distkit AllReduceAsync) vs %.2f us (raw ncclAllReduce), +%.2f us; "
          "device allocations in those calls: %ld\n",
          bytes, size, n, Median(ours), Median(theirs),
          Median(ours) - Median(theirs), allocations);
    }
  }
  cuda.StreamDestroy(stream);
  nccl.CommDestroy(raw);
  return 0;
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  if (!distkit::testing::JoinDistJob("nccl")) return 1;
  const int calls = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int rc = distkit::Run(calls);
  distkit::dist::DestroyDist();
  return rc;
}
