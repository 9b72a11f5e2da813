// dkgpusim's CUDA half enforces the real runtime's rules: device memory the
// host cannot touch, streams that run late, the legacy default stream's
// synchronization, events, per-thread devices and contexts.

#include <fcntl.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "testing/gpu_sim/sim_test_util.h"

namespace dksim_test {
namespace {

// In a child: `count` devices, device `dev` named `name`.
int CheckDevices(const Api& api, int count, int dev, const std::string& name) {
  int n = -1;
  SIM_CUDA(api.cudaGetDeviceCount(&n));
  SIM_CHECK(n == count);
  cudaDeviceProp prop;
  SIM_CUDA(api.cudaGetDeviceProperties(&prop, dev));
  SIM_CHECK(std::string(prop.name) == name);
  return 0;
}

TEST(SimCuda, DeviceCountFollowsTheEnvironment) {
  auto r = RunChild(
      [] {
        const Api& api = Load();
        SIM_CHECK(CheckDevices(api, 3, 2, "dkgpusim device 2") == 0);
        SIM_CHECK(api.cudaSetDevice(3) == cudaErrorInvalidDevice);
        SIM_CHECK(api.cudaGetLastError() == cudaErrorInvalidDevice);
        SIM_CHECK(api.cudaGetLastError() == cudaSuccess);
        return 0;
      },
      {{"DKSIM_DEVICES", "3"}});
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_NE(r.err.find("dkgpusim: seed"), std::string::npos) << r.err;

  r = RunChild(
      [] {
        const Api& api = Load();
        int n = -1;
        SIM_CHECK(api.cudaGetDeviceCount(&n) == cudaErrorNoDevice);
        SIM_CHECK(n == 0);
        SIM_CHECK(api.cudaGetLastError() == cudaErrorNoDevice);
        void* p = nullptr;
        SIM_CHECK(api.cudaMalloc(&p, 16) == cudaErrorNoDevice);
        return 0;
      },
      {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();

  r = RunChild([] { return CheckDevices(Load(), 1, 0, "dkgpusim device 1"); },
               {{"CUDA_VISIBLE_DEVICES", "1"}});
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST(SimCuda, HostAccessToDeviceMemoryFaults) {
  auto r = RunChild([] {
    const Api& api = Load();
    void* d = nullptr;
    SIM_CUDA(api.cudaMalloc(&d, 64));
    char host[16];
    std::memcpy(host, d, sizeof(host));  // must fault
    return static_cast<int>(write(1, host, sizeof(host)) < 0);
  });
  EXPECT_TRUE(r.KilledBy(SIGSEGV)) << r.Describe();

  r = RunChild([] {
    const Api& api = Load();
    int* d = nullptr;
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 64));
    *static_cast<volatile int*>(d + 3) = 1;  // must fault
    return 0;
  });
  EXPECT_TRUE(r.KilledBy(SIGSEGV)) << r.Describe();
}

TEST(SimCuda, PointerAttributesAndAllocationCounts) {
  auto r = RunChild([] {
    const Api& api = Load();
    SIM_CUDA(api.cudaSetDevice(1));
    SIM_CHECK(api.dksimMallocCount(1) == 0);
    char* d = nullptr;
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 100));
    SIM_CHECK(api.dksimMallocCount(1) == 1 && api.dksimMallocCount(0) == 0);
    SIM_CHECK(api.dksimLiveAllocations(1) == 1);
    cudaPointerAttributes a;
    SIM_CUDA(api.cudaPointerGetAttributes(&a, d + 40));
    SIM_CHECK(a.type == cudaMemoryTypeDevice && a.device == 1);
    int host = 0;
    SIM_CUDA(api.cudaPointerGetAttributes(&a, &host));
    SIM_CHECK(a.type == cudaMemoryTypeUnregistered);
    void* pinned = nullptr;
    SIM_CUDA(api.cudaMallocHost(&pinned, 32));
    SIM_CUDA(api.cudaPointerGetAttributes(&a, pinned));
    SIM_CHECK(a.type == cudaMemoryTypeHost);
    SIM_CUDA(api.cudaFreeHost(pinned));
    SIM_CUDA(api.cudaFree(d));
    SIM_CHECK(api.dksimLiveAllocations(1) == 0);
    SIM_CHECK(api.dksimMallocCount(1) == 1);
    return 0;
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

// What tests ask to tell device work from host round trips: copies by
// direction and memsets of device memory (host-only copies not counted).
TEST(SimCuda, CopiesAndMemsetsAreCounted) {
  auto r = RunChild([] {
    const Api& api = Load();
    SIM_CUDA(api.cudaSetDevice(1));
    char* d = nullptr;
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 64));
    char host[64] = {};
    char other[64] = {};
    SIM_CHECK(api.dksimCopyCount(1) == 0 && api.dksimCopyCount(2) == 0 &&
              api.dksimCopyCount(3) == 0 && api.dksimMemsetCount() == 0);
    SIM_CUDA(api.cudaMemcpy(d, host, 64, cudaMemcpyHostToDevice));
    SIM_CUDA(api.cudaMemcpyAsync(d + 32, d, 32, cudaMemcpyDeviceToDevice,
                                 cudaStreamLegacy));
    SIM_CUDA(api.cudaMemsetAsync(d, 0, 16, cudaStreamLegacy));
    SIM_CUDA(api.cudaMemset(d, 7, 16));
    SIM_CUDA(api.cudaMemcpy(host, d, 64, cudaMemcpyDefault));
    SIM_CUDA(api.cudaMemcpy(other, host, 64, cudaMemcpyHostToHost));
    SIM_CHECK(api.dksimCopyCount(1) == 1 && api.dksimCopyCount(2) == 1 &&
              api.dksimCopyCount(3) == 1);
    SIM_CHECK(api.dksimMemsetCount() == 2);
    SIM_CHECK(api.dksimCopyCount(0) == -1 && api.dksimCopyCount(4) == -1);
    SIM_CHECK(host[0] == 7 && host[16] == host[40]);
    SIM_CUDA(api.cudaFree(d));
    return 0;
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST(SimCuda, WrongCopyKindsAreRefused) {
  auto r = RunChild([] {
    const Api& api = Load();
    char* d = nullptr;
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 16));
    char host[16] = {};
    // A host pointer passed as device memory, and the other way round.
    SIM_CHECK(api.cudaMemcpy(host, host + 8, 8, cudaMemcpyDeviceToHost) ==
              cudaErrorInvalidValue);
    SIM_CHECK(api.cudaMemcpy(d, host, 8, cudaMemcpyDeviceToDevice) ==
              cudaErrorInvalidValue);
    SIM_CHECK(api.cudaMemcpy(host, d, 8, cudaMemcpyHostToDevice) ==
              cudaErrorInvalidValue);
    SIM_CHECK(api.cudaMemset(host, 0, 8) == cudaErrorInvalidValue);
    SIM_CHECK(api.cudaGetLastError() == cudaErrorInvalidValue);
    // cudaMemcpyDefault infers the direction.
    SIM_CUDA(api.cudaMemcpy(d, "abcdefgh", 8, cudaMemcpyDefault));
    SIM_CUDA(api.cudaMemcpy(host, d, 8, cudaMemcpyDefault));
    SIM_CHECK(std::memcmp(host, "abcdefgh", 8) == 0);
    return 0;
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST(SimCuda, OutOfBoundsAndUseAfterFreeAbort) {
  auto r = RunChild([] {
    const Api& api = Load();
    char* d = nullptr;
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 16));
    char host[32];
    api.cudaMemcpy(host, d + 8, 9, cudaMemcpyDeviceToHost);
    return 0;
  });
  EXPECT_TRUE(r.KilledBy(SIGABRT)) << r.Describe();
  EXPECT_NE(r.err.find("dkgpusim: cudaMemcpy: out-of-bounds device access"),
            std::string::npos)
      << r.err;

  r = RunChild([] {
    const Api& api = Load();
    char* d = nullptr;
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 16));
    SIM_CUDA(api.cudaFree(d));
    char host[8];
    api.cudaMemcpy(host, d, 8, cudaMemcpyDeviceToHost);
    return 0;
  });
  EXPECT_TRUE(r.KilledBy(SIGABRT)) << r.Describe();
  EXPECT_NE(r.err.find("use after free"), std::string::npos) << r.err;
}

// The producer's chain: 20 steps of up to 1 ms each (DKSIM_MAX_DELAY_US),
// after kHoldUs of device work (dksimStreamSleep) at its head, against at
// most 1 ms for the one step that reads. Without the hold the chain took
// about 10 ms, and on a loaded CI machine the child issuing the read was
// now and then descheduled longer than that, so a reader that did not wait
// came late and read the right data (2 runs in 10, once): with the hold, a
// reader that does not wait is early unless its own next call comes 200 ms
// late.
constexpr int kSteps = 20;
constexpr long kHoldUs = 200000;

// What every scenario starts from: two 64-byte device buffers, zeroed (the
// zeroing done), and a stream s with `flags`. False on an API failure.
bool Prepare(const Api& api, int** buf, int** out, cudaStream_t* s,
             unsigned flags) {
  return !api.cudaMalloc(reinterpret_cast<void**>(buf), 64) &&
         !api.cudaMalloc(reinterpret_cast<void**>(out), 64) &&
         !api.cudaMemset(*buf, 0, 64) && !api.cudaMemset(*out, 0, 64) &&
         !api.cudaDeviceSynchronize() &&
         !api.cudaStreamCreateWithFlags(s, flags);
}

// Queues on s kHoldUs of device work, then the steps writing into buf:
// 1..kSteps-1, and 42 last when `finish`. False on an API failure.
bool QueueSlowWrites(const Api& api, int* buf, cudaStream_t s, bool finish) {
  if (api.dksimStreamSleep(s, kHoldUs)) return false;
  for (int step = 1; step < kSteps; ++step) {
    if (api.cudaMemsetAsync(buf, step, 64, s)) return false;
  }
  return !finish || !api.cudaMemsetAsync(buf, 42, 64, s);
}

// A scenario's result: 1 when all 64 bytes read back are 42, else 0.
int All42(const unsigned char* host) {
  return std::all_of(host, host + 64, [](unsigned char v) { return v == 42; });
}

// Producer writes 42 into `buf` after a chain of delayed steps on stream p;
// the consumer copies it on stream c, waiting for an event or not. Returns
// whether the consumer saw 42 (0/1), or 2 on an API failure.
int ProducerConsumer(bool wait, unsigned consumer_flags) {
  const Api& api = Load();
  int *buf = nullptr, *out = nullptr;
  cudaStream_t p, c;
  cudaEvent_t done;
  if (!Prepare(api, &buf, &out, &p, cudaStreamNonBlocking) ||
      api.cudaStreamCreateWithFlags(&c, consumer_flags) ||
      api.cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) {
    return 2;
  }
  if (!QueueSlowWrites(api, buf, p, true)) return 2;
  if (api.cudaEventRecord(done, p)) return 2;
  if (wait && api.cudaStreamWaitEvent(c, done, 0)) return 2;
  if (api.cudaMemcpyAsync(out, buf, 64, cudaMemcpyDeviceToDevice, c)) return 2;
  if (api.cudaDeviceSynchronize()) return 2;
  unsigned char host[64];
  if (api.cudaMemcpy(host, out, 64, cudaMemcpyDeviceToHost)) return 2;
  return All42(host);
}

// Runs scenario under seeds 1..10; how many runs saw the right data.
int RightInTenSeeds(const std::function<int()>& scenario) {
  int right = 0;
  for (int seed = 1; seed <= 10; ++seed) {
    auto r = RunChild(scenario, {{"DKSIM_SEED", std::to_string(seed)},
                                 {"DKSIM_MAX_DELAY_US", "1000"}});
    EXPECT_TRUE(r.ExitedWith(0) || r.ExitedWith(1)) << r.Describe();
    right += r.ExitedWith(1);
  }
  return right;
}

TEST(SimCuda, AMissingStreamWaitGivesWrongData) {
  EXPECT_LE(RightInTenSeeds(
                [] { return ProducerConsumer(false, cudaStreamNonBlocking); }),
            1);
  EXPECT_EQ(RightInTenSeeds(
                [] { return ProducerConsumer(true, cudaStreamNonBlocking); }),
            10);
}

// Work on stream s (blocking or not) writes 42 after delays; a copy on the
// legacy default stream follows without any event. Returns as above.
int LegacyAfterStream(unsigned flags) {
  const Api& api = Load();
  int *buf = nullptr, *out = nullptr;
  cudaStream_t s;
  if (!Prepare(api, &buf, &out, &s, flags)) return 2;
  if (!QueueSlowWrites(api, buf, s, true)) return 2;
  if (api.cudaMemcpyAsync(out, buf, 64, cudaMemcpyDeviceToDevice, nullptr)) {
    return 2;
  }
  unsigned char host[64];
  // Legacy stream again: it returns after the copy above.
  if (api.cudaMemcpy(host, out, 64, cudaMemcpyDeviceToHost)) return 2;
  if (api.cudaDeviceSynchronize()) return 2;
  return All42(host);
}

// The reverse: legacy-stream work first, then a copy on stream s.
int StreamAfterLegacy(unsigned flags) {
  const Api& api = Load();
  int *buf = nullptr, *out = nullptr;
  cudaStream_t s;
  if (!Prepare(api, &buf, &out, &s, flags)) return 2;
  if (!QueueSlowWrites(api, buf, cudaStreamLegacy, true)) return 2;
  if (api.cudaMemcpyAsync(out, buf, 64, cudaMemcpyDeviceToDevice, s)) return 2;
  if (api.cudaStreamSynchronize(s)) return 2;
  unsigned char host[64];
  if (api.cudaMemcpyAsync(host, out, 64, cudaMemcpyDeviceToHost, s)) return 2;
  return All42(host);
}

TEST(SimCuda, TheLegacyStreamSynchronizesWithBlockingStreamsOnly) {
  EXPECT_EQ(
      RightInTenSeeds([] { return LegacyAfterStream(cudaStreamDefault); }), 10);
  EXPECT_LE(
      RightInTenSeeds([] { return LegacyAfterStream(cudaStreamNonBlocking); }),
      1);
  EXPECT_EQ(
      RightInTenSeeds([] { return StreamAfterLegacy(cudaStreamDefault); }), 10);
  EXPECT_LE(
      RightInTenSeeds([] { return StreamAfterLegacy(cudaStreamNonBlocking); }),
      1);
}

// cudaMemcpy from pageable memory to the device returns once the data is
// staged, before the device has it (CUDA's API synchronization behavior):
// a non-blocking stream that reads right after may see the old data. With
// DKSIM_SYNC_MEMCPY=1 it returns when done.
int NonBlockingReadAfterCudaMemcpy() {
  const Api& api = Load();
  int *buf = nullptr, *out = nullptr;
  cudaStream_t s;
  if (!Prepare(api, &buf, &out, &s, cudaStreamNonBlocking)) return 2;
  // Earlier work on the legacy stream, which the copy queues behind.
  if (!QueueSlowWrites(api, buf, cudaStreamLegacy, false)) return 2;
  std::vector<unsigned char> host(64, 42);
  if (api.cudaMemcpy(buf, host.data(), 64, cudaMemcpyHostToDevice)) return 2;
  if (api.cudaMemcpyAsync(out, buf, 64, cudaMemcpyDeviceToDevice, s)) return 2;
  if (api.cudaStreamSynchronize(s)) return 2;
  if (api.cudaMemcpyAsync(host.data(), out, 64, cudaMemcpyDeviceToHost, s)) {
    return 2;
  }
  return All42(host.data());
}

TEST(SimCuda, CudaMemcpyToTheDeviceMayReturnBeforeTheDataLands) {
  EXPECT_LE(RightInTenSeeds(NonBlockingReadAfterCudaMemcpy), 1);
  int right = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    auto r = RunChild(NonBlockingReadAfterCudaMemcpy,
                      {{"DKSIM_SEED", std::to_string(seed)},
                       {"DKSIM_MAX_DELAY_US", "1000"},
                       {"DKSIM_SYNC_MEMCPY", "1"}});
    right += r.ExitedWith(1);
  }
  EXPECT_EQ(right, 3);
}

TEST(SimCuda, CopiesFromPageableMemoryAreStagedAndToItWait) {
  auto r = RunChild(
      [] {
        const Api& api = Load();
        int* d = nullptr;
        SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 4 * 64));
        cudaStream_t s;
        SIM_CUDA(api.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        std::vector<int> host(64, 7);
        SIM_CUDA(api.cudaMemcpyAsync(d, host.data(), 4 * 64,
                                     cudaMemcpyHostToDevice, s));
        // Staged when the call returned: this change must not arrive.
        std::fill(host.begin(), host.end(), 9);
        std::vector<int> back(64, 0);
        // To pageable memory the call itself waits for the stream.
        SIM_CUDA(api.cudaMemcpyAsync(back.data(), d, 4 * 64,
                                     cudaMemcpyDeviceToHost, s));
        for (int v : back) SIM_CHECK(v == 7);
        // To pinned memory it does not: the data arrives later.
        int* pinned = nullptr;
        SIM_CUDA(api.cudaMallocHost(reinterpret_cast<void**>(&pinned), 4 * 64));
        std::fill(pinned, pinned + 64, 0);
        // Queued behind kHoldUs of device work, so surely not done when the
        // call returns, however late this process runs next.
        int* other = nullptr;
        SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&other), 64));
        SIM_CHECK(api.dksimStreamSleep(s, kHoldUs) == 0);
        for (int i = 0; i < 10; ++i) {
          SIM_CUDA(api.cudaMemsetAsync(other, i, 64, s));
        }
        SIM_CUDA(
            api.cudaMemcpyAsync(pinned, d, 4 * 64, cudaMemcpyDeviceToHost, s));
        const bool early = pinned[63] == 7;
        SIM_CUDA(api.cudaStreamSynchronize(s));
        SIM_CHECK(pinned[63] == 7);
        SIM_CHECK(!early);
        return 0;
      },
      {{"DKSIM_MAX_DELAY_US", "2000"}});
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST(SimCuda, EventsAndStreamQueries) {
  auto r = RunChild(
      [] {
        const Api& api = Load();
        int* d = nullptr;
        SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 64));
        cudaStream_t s;
        SIM_CUDA(api.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        cudaEvent_t e;
        SIM_CUDA(api.cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        SIM_CUDA(api.cudaEventQuery(e));  // never recorded: complete
        // Held kHoldUs first: not ready at the queries below whatever the
        // host's scheduling.
        SIM_CHECK(api.dksimStreamSleep(s, kHoldUs) == 0);
        for (int i = 0; i < 10; ++i) SIM_CUDA(api.cudaMemsetAsync(d, i, 64, s));
        SIM_CUDA(api.cudaEventRecord(e, s));
        SIM_CHECK(api.cudaEventQuery(e) == cudaErrorNotReady);
        SIM_CHECK(api.cudaStreamQuery(s) == cudaErrorNotReady);
        // Not ready is no error.
        SIM_CHECK(api.cudaPeekAtLastError() == cudaSuccess);
        SIM_CUDA(api.cudaEventSynchronize(e));
        SIM_CUDA(api.cudaEventQuery(e));
        SIM_CUDA(api.cudaStreamQuery(s));
        // An event of device 0 recorded on a stream of device 1.
        SIM_CUDA(api.cudaSetDevice(1));
        cudaStream_t s1;
        SIM_CUDA(api.cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
        SIM_CHECK(api.cudaEventRecord(e, s1) == cudaErrorInvalidResourceHandle);
        SIM_CHECK(api.cudaEventRecord(e, nullptr) ==
                  cudaErrorInvalidResourceHandle);
        // Waiting on another device's event is allowed.
        SIM_CUDA(api.cudaStreamWaitEvent(s1, e, 0));
        SIM_CUDA(api.cudaStreamDestroy(s1));
        SIM_CHECK(api.cudaStreamDestroy(s1) == cudaErrorInvalidResourceHandle);
        SIM_CUDA(api.cudaEventDestroy(e));
        SIM_CHECK(api.cudaEventQuery(e) == cudaErrorInvalidResourceHandle);
        // cudaStreamPerThread exists, on the current device.
        SIM_CUDA(api.cudaSetDevice(0));
        SIM_CUDA(api.cudaMemsetAsync(d, 3, 64, cudaStreamPerThread));
        SIM_CUDA(api.cudaStreamSynchronize(cudaStreamPerThread));
        return 0;
      },
      {{"DKSIM_MAX_DELAY_US", "2000"}});
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST(SimCuda, DevicesAndErrorsArePerThreadAndContextsAreRecorded) {
  char log_path[] = "/tmp/dkgpusim_ctx_XXXXXX";
  const int fd = mkstemp(log_path);
  ASSERT_GE(fd, 0);
  close(fd);
  auto r = RunChild(
      [] {
        const Api& api = Load();
        int dev = -1;
        std::thread t([&] {
          api.cudaSetDevice(1);
          api.cudaGetDevice(&dev);
          api.cudaSetDevice(7);  // an error only this thread sees
        });
        t.join();
        SIM_CHECK(dev == 1);
        SIM_CHECK(api.cudaPeekAtLastError() == cudaSuccess);
        // The main thread never chose a device and touched none.
        SIM_CHECK(api.dksimContextMask() == 2u);
        int mine = -1;
        SIM_CUDA(api.cudaGetDevice(&mine));
        SIM_CHECK(mine == 0);
        SIM_CHECK(api.dksimContextMask() == 2u);
        // A call that needs the current device creates device 0's context.
        void* p = nullptr;
        SIM_CUDA(api.cudaMalloc(&p, 8));
        SIM_CHECK(api.dksimContextMask() == 3u);
        return 0;
      },
      {{"DKSIM_CONTEXT_LOG", log_path}});
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
  std::ifstream in(log_path);
  std::stringstream text;
  text << in.rdbuf();
  unlink(log_path);
  int pid = 0, d1 = -1, d2 = -1, pid2 = 0;
  std::istringstream lines(text.str());
  lines >> pid >> d1 >> pid2 >> d2;
  EXPECT_EQ(d1, 1) << text.str();
  EXPECT_EQ(d2, 0) << text.str();
  EXPECT_EQ(pid, pid2) << text.str();
}

TEST(SimCuda, AChildForkedAfterCudaUseCannotUseIt) {
  auto r = RunChild([] {
    const Api& api = Load();
    void* p = nullptr;
    SIM_CUDA(api.cudaMalloc(&p, 8));
    const pid_t child = fork();
    if (child == 0) {
      void* q = nullptr;
      _exit(api.cudaMalloc(&q, 8) == cudaErrorInitializationError ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    SIM_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return 0;
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_NE(r.err.find("dkgpusim: CUDA called in a process forked"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace dksim_test
