// One rank of tools/dkbench/startup_bench.py, torch's side, in LibTorch C++
// so that Python's import time does not hide the comparison: c10d's
// TCPStore (rank 0 serves it at MASTER_PORT) and ProcessGroupGloo, one
// all_reduce of one float, checked, then the wall clock (CLOCK_REALTIME, ns)
// at which it ended.
#include <time.h>
#include <torch/types.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

int main() {
  const int rank = std::atoi(std::getenv("RANK"));
  const int size = std::atoi(std::getenv("WORLD_SIZE"));
  c10d::TCPStoreOptions store_options;
  store_options.port =
      static_cast<std::uint16_t>(std::atoi(std::getenv("MASTER_PORT")));
  store_options.isServer = rank == 0;
  store_options.numWorkers = size;
  store_options.waitWorkers = false;
  store_options.timeout = std::chrono::minutes(10);
  auto store = c10::make_intrusive<c10d::TCPStore>(std::getenv("MASTER_ADDR"),
                                                   store_options);
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = std::chrono::minutes(10);
  options->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10d::ProcessGroupGloo group(store, rank, size, options);
  std::vector<at::Tensor> tensors = {torch::ones({1})};
  group.allreduce(tensors)->wait();
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  if (tensors[0].item<float>() != static_cast<float>(size)) {
    std::fprintf(stderr, "wrong sum %f\n", tensors[0].item<float>());
    return 4;
  }
  std::printf("first_all_reduce_end_ns=%lld\n",
              static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec);
  return 0;
}
