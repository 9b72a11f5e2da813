// What the CUDA half (sim_cuda.cc) of dkgpusim offers its NCCL half
// (sim_nccl.cc). Internal: nothing here is exported from libdkgpusim.so.

#ifndef DISTKIT_TESTING_GPU_SIM_SIM_INTERNAL_H_
#define DISTKIT_TESTING_GPU_SIM_SIM_INTERNAL_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace dksim {

// Most devices DKSIM_DEVICES may ask for (dksimContextMask has a bit each).
constexpr int kMaxDevices = 16;

// The environment, read once when the library loads.
struct Config {
  int devices = 2;            // visible to this process
  std::vector<int> physical;  // process ordinal -> machine-wide device
  uint64_t seed = 0;
  int max_delay_us = 200;
  std::string context_log;        // DKSIM_CONTEXT_LOG
  int die_rank = -1, die_at = 0;  // DKSIM_NCCL_DIE_RANK / _AT
  int hang_rank = -1, hang_at = 0;
  bool nccl_inprogress = false;  // DKSIM_NCCL_INPROGRESS
  // DKSIM_SYNC_MEMCPY: cudaMemcpy and cudaMemset return only once their
  // device work is done (looser than the real runtime; see README.md).
  bool sync_memcpy = false;
};
const Config& Cfg();

// One line on stderr starting "dkgpusim: " (added here), written at once.
void Print(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// Print, then abort(): a rule of the real hardware was broken.
[[noreturn]] void Fatal(const char* fmt, ...)
    __attribute__((format(printf, 1, 2)));

// Uniform in [0, n); seeded by DKSIM_SEED.
uint64_t RandomBelow(uint64_t n);
int64_t NowNs();  // CLOCK_MONOTONIC

// The calling thread's current device (a new thread starts on 0).
int CurrentDevice();
// Creates device d's context in this process if there is none yet.
void EnsureContext(int device);
// True when this process was forked after it used CUDA (the child may not).
bool ForkedAfterInit();

struct Stream;

// "Wait until `stream` has completed its work item number `seq`".
struct Dep {
  Stream* stream;
  uint64_t seq;
};

struct WorkItem {
  uint64_t seq = 0;
  std::vector<Dep> deps;
  std::function<void()> fn;  // empty for markers (event records, waits)
  int delay_us = 0;
};

// A CUDA stream: its work runs in order on a thread of its own.
struct Stream {
  int device = 0;
  bool nonblocking = false;  // cudaStreamNonBlocking
  bool legacy = false;       // the device's legacy default stream
  bool per_thread = false;   // a thread's cudaStreamPerThread
  unsigned flags = 0;
  std::mutex mu;  // guards queue and destroyed
  std::condition_variable cv;
  std::deque<WorkItem> queue;
  bool destroyed = false;
  uint64_t enqueued = 0;  // guarded by the device's enqueue lock
  std::atomic<uint64_t> completed{0};
};

// The stream a handle names for work on `device`: 0 and cudaStreamLegacy
// are that device's legacy stream, cudaStreamPerThread the calling
// thread's stream there; any other handle must be a live stream (else
// cudaErrorInvalidResourceHandle).
cudaError_t StreamForDevice(cudaStream_t handle, int device, Stream** out);
// As above for the calling thread's current device.
cudaError_t ResolveStream(cudaStream_t handle, Stream** out);

// Queues fn on s behind the implicit waits the legacy stream rules add
// (and `extra`); returns the item's number. A random delay precedes fn.
uint64_t Enqueue(Stream* s, std::function<void()> fn, std::vector<Dep> extra,
                 bool delay);
// Blocks until s has completed item seq.
void WaitFor(Stream* s, uint64_t seq);
// Wakes everything waiting in WaitFor-like loops (used by the NCCL half when
// a communicator's pending count drops).
std::mutex& DoneMutex();
std::condition_variable& DoneCv();

// What memory a pointer is.
enum class PtrKind { kHost, kPinned, kDevice, kFreedDevice };
PtrKind Classify(const void* p, int* device);
// The simulator's own address for [p, p + bytes) of device memory, which
// must lie inside one live cudaMalloc allocation; anything else is a fatal
// device fault (printed, then abort), as `what` names.
char* Translate(const void* p, size_t bytes, const char* what);
// Whether [p, p + bytes) lies in one live allocation on `device`; fills a
// reason when not.
bool CheckDeviceRange(const void* p, size_t bytes, int device,
                      std::string* why);

}  // namespace dksim

#endif  // DISTKIT_TESTING_GPU_SIM_SIM_INTERNAL_H_
