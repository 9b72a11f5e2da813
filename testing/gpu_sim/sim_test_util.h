// Helpers for dkgpusim's own tests: the library opened with dlopen (as
// distkit opens libcudart and libnccl), and child processes with a time
// limit whose exit status and stderr the test inspects.
//
// Each scenario runs in a forked child that sets its DKSIM_* variables and
// only then loads the library (the variables are read at load), so the test
// process itself never loads it.

#ifndef DISTKIT_TESTING_GPU_SIM_SIM_TEST_UTIL_H_
#define DISTKIT_TESTING_GPU_SIM_SIM_TEST_UTIL_H_

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace dksim_test {

// The entry points the tests use, resolved with dlsym.
struct Api {
  void* handle = nullptr;
#define DK_FN(name) decltype(&::name) name = nullptr
  DK_FN(cudaGetDeviceCount);
  DK_FN(cudaGetDevice);
  DK_FN(cudaSetDevice);
  DK_FN(cudaGetLastError);
  DK_FN(cudaPeekAtLastError);
  DK_FN(cudaGetErrorName);
  DK_FN(cudaGetDeviceProperties);
  // Spelled out: cuda_runtime.h overloads these as templates.
  cudaError_t (*cudaMalloc)(void**, size_t) = nullptr;
  cudaError_t (*cudaMallocHost)(void**, size_t) = nullptr;
  DK_FN(cudaFree);
  DK_FN(cudaFreeHost);
  DK_FN(cudaMemcpy);
  DK_FN(cudaMemcpyAsync);
  DK_FN(cudaMemset);
  DK_FN(cudaMemsetAsync);
  DK_FN(cudaStreamCreateWithFlags);
  DK_FN(cudaStreamDestroy);
  DK_FN(cudaStreamSynchronize);
  DK_FN(cudaStreamQuery);
  DK_FN(cudaStreamWaitEvent);
  DK_FN(cudaEventCreateWithFlags);
  DK_FN(cudaEventDestroy);
  DK_FN(cudaEventRecord);
  DK_FN(cudaEventQuery);
  DK_FN(cudaEventSynchronize);
  DK_FN(cudaDeviceSynchronize);
  DK_FN(cudaPointerGetAttributes);
  DK_FN(ncclGetVersion);
  DK_FN(ncclGetErrorString);
  DK_FN(ncclGetUniqueId);
  DK_FN(ncclCommInitRank);
  DK_FN(ncclCommInitRankConfig);
  DK_FN(ncclCommSplit);
  DK_FN(ncclCommDestroy);
  DK_FN(ncclCommAbort);
  DK_FN(ncclCommGetAsyncError);
  DK_FN(ncclCommCount);
  DK_FN(ncclCommUserRank);
  DK_FN(ncclCommCuDevice);
  DK_FN(ncclGroupStart);
  DK_FN(ncclGroupEnd);
  DK_FN(ncclAllReduce);
  DK_FN(ncclBroadcast);
  DK_FN(ncclReduce);
  DK_FN(ncclAllGather);
  DK_FN(ncclReduceScatter);
  DK_FN(ncclSend);
  DK_FN(ncclRecv);
  DK_FN(ncclRedOpCreatePreMulSum);
  DK_FN(ncclRedOpDestroy);
#undef DK_FN
  unsigned (*dksimContextMask)(void) = nullptr;
  long (*dksimMallocCount)(int) = nullptr;
  long (*dksimLiveAllocations)(int) = nullptr;
  long (*dksimCopyCount)(int) = nullptr;
  long (*dksimMemsetCount)(void) = nullptr;
  cudaError_t (*dksimStreamSleep)(cudaStream_t, long) = nullptr;
};

inline const char* LibraryPath() {
  const char* p = std::getenv("DKGPUSIM_LIB");
  if (p == nullptr || *p == '\0') {
    std::fprintf(stderr, "DKGPUSIM_LIB is not set (the BUILD file sets it)\n");
    std::abort();
  }
  return p;
}

// Loads the library once in this process; aborts when anything is missing.
inline const Api& Load() {
  static Api* api = [] {
    Api* a = new Api;
    a->handle = dlopen(LibraryPath(), RTLD_NOW | RTLD_LOCAL);
    if (a->handle == nullptr) {
      std::fprintf(stderr, "dlopen: %s\n", dlerror());
      std::abort();
    }
    auto get = [a](const char* name, auto** field) {
      void* p = dlsym(a->handle, name);
      if (p == nullptr) {
        std::fprintf(stderr, "missing symbol %s\n", name);
        std::abort();
      }
      *field = reinterpret_cast<std::remove_pointer_t<decltype(field)>>(p);
    };
#define DK_GET(name) get(#name, &a->name)
    DK_GET(cudaGetDeviceCount);
    DK_GET(cudaGetDevice);
    DK_GET(cudaSetDevice);
    DK_GET(cudaGetLastError);
    DK_GET(cudaPeekAtLastError);
    DK_GET(cudaGetErrorName);
    DK_GET(cudaGetDeviceProperties);
    DK_GET(cudaMalloc);
    DK_GET(cudaMallocHost);
    DK_GET(cudaFree);
    DK_GET(cudaFreeHost);
    DK_GET(cudaMemcpy);
    DK_GET(cudaMemcpyAsync);
    DK_GET(cudaMemset);
    DK_GET(cudaMemsetAsync);
    DK_GET(cudaStreamCreateWithFlags);
    DK_GET(cudaStreamDestroy);
    DK_GET(cudaStreamSynchronize);
    DK_GET(cudaStreamQuery);
    DK_GET(cudaStreamWaitEvent);
    DK_GET(cudaEventCreateWithFlags);
    DK_GET(cudaEventDestroy);
    DK_GET(cudaEventRecord);
    DK_GET(cudaEventQuery);
    DK_GET(cudaEventSynchronize);
    DK_GET(cudaDeviceSynchronize);
    DK_GET(cudaPointerGetAttributes);
    DK_GET(ncclGetVersion);
    DK_GET(ncclGetErrorString);
    DK_GET(ncclGetUniqueId);
    DK_GET(ncclCommInitRank);
    DK_GET(ncclCommInitRankConfig);
    DK_GET(ncclCommSplit);
    DK_GET(ncclCommDestroy);
    DK_GET(ncclCommAbort);
    DK_GET(ncclCommGetAsyncError);
    DK_GET(ncclCommCount);
    DK_GET(ncclCommUserRank);
    DK_GET(ncclCommCuDevice);
    DK_GET(ncclGroupStart);
    DK_GET(ncclGroupEnd);
    DK_GET(ncclAllReduce);
    DK_GET(ncclBroadcast);
    DK_GET(ncclReduce);
    DK_GET(ncclAllGather);
    DK_GET(ncclReduceScatter);
    DK_GET(ncclSend);
    DK_GET(ncclRecv);
    DK_GET(ncclRedOpCreatePreMulSum);
    DK_GET(ncclRedOpDestroy);
    DK_GET(dksimContextMask);
    DK_GET(dksimMallocCount);
    DK_GET(dksimLiveAllocations);
    DK_GET(dksimCopyCount);
    DK_GET(dksimMemsetCount);
    DK_GET(dksimStreamSleep);
#undef DK_GET
    return a;
  }();
  return *api;
}

// In a child: a failed check prints where and makes the child exit 1.
#define SIM_CHECK(cond)                                                   \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "check failed: %s (%s:%d)\n", #cond, __FILE__, \
                   __LINE__);                                             \
      return 1;                                                           \
    }                                                                     \
  } while (0)

#define SIM_CUDA(call) SIM_CHECK((call) == cudaSuccess)
#define SIM_NCCL(call) SIM_CHECK((call) == ncclSuccess)

using Env = std::vector<std::pair<std::string, std::string>>;

struct ChildResult {
  int status = 0;   // as waitpid reports it
  std::string err;  // what the child wrote to stderr
  bool timed_out = false;

  bool ExitedWith(int code) const {
    return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == code;
  }
  bool KilledBy(int sig) const {
    return !timed_out && WIFSIGNALED(status) && WTERMSIG(status) == sig;
  }
  std::string Describe() const {
    char buf[128];
    if (timed_out) return "timed out; stderr:\n" + err;
    if (WIFEXITED(status)) {
      std::snprintf(buf, sizeof(buf), "exit %d", WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
      std::snprintf(buf, sizeof(buf), "signal %d", WTERMSIG(status));
    } else {
      std::snprintf(buf, sizeof(buf), "status %d", status);
    }
    return std::string(buf) + "; stderr:\n" + err;
  }
};

// Runs fn(i) in n forked children at once, each with env set, and collects
// their exit statuses and stderr; children still running after timeout_s
// are killed (and reported as timed out), so no test can hang.
inline std::vector<ChildResult> RunChildren(int n,
                                            const std::function<int(int)>& fn,
                                            const Env& env = {},
                                            int timeout_s = 20) {
  std::vector<pid_t> pids(n);
  std::vector<int> fds(n);
  for (int i = 0; i < n; ++i) {
    int p[2];
    if (pipe(p) != 0) std::abort();
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) std::abort();
    if (pid == 0) {
      close(p[0]);
      dup2(p[1], 2);
      close(p[1]);
      alarm(timeout_s + 5);  // a backstop if the parent is gone
      for (const auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      int code = fn(i);
      std::fflush(nullptr);
      _exit(code);
    }
    close(p[1]);
    pids[i] = pid;
    fds[i] = p[0];
  }
  std::vector<ChildResult> out(n);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int open_fds = n;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) break;
    std::vector<pollfd> pf;
    std::vector<int> which;
    for (int i = 0; i < n; ++i) {
      if (fds[i] >= 0) {
        pf.push_back({fds[i], POLLIN, 0});
        which.push_back(i);
      }
    }
    if (poll(pf.data(), pf.size(),
             static_cast<int>(std::min<long>(left, 200))) < 0) {
      continue;
    }
    for (size_t k = 0; k < pf.size(); ++k) {
      if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t got = read(pf[k].fd, buf, sizeof(buf));
      if (got > 0) {
        out[which[k]].err.append(buf, got);
      } else {
        close(pf[k].fd);
        fds[which[k]] = -1;
        --open_fds;
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    if (fds[i] >= 0) {
      // Past the deadline: kill, then collect.
      kill(pids[i], SIGKILL);
      out[i].timed_out = true;
      close(fds[i]);
    }
    waitpid(pids[i], &out[i].status, 0);
    // Shown in the test log, so that a failure explains itself.
    std::fprintf(stderr, "--- child %d: %s", i, out[i].Describe().c_str());
    if (out[i].err.empty() || out[i].err.back() != '\n')
      std::fprintf(stderr, "\n");
  }
  return out;
}

inline ChildResult RunChild(const std::function<int()>& fn, const Env& env = {},
                            int timeout_s = 20) {
  return RunChildren(
      1, [&](int) { return fn(); }, env, timeout_s)[0];
}

// Memory the children of one test share (mapped before the fork): how rank
// 0 hands out ncclUniqueIds, and a few counters for handshakes.
struct Board {
  std::atomic<int> id_ready[8];
  ncclUniqueId ids[8];
  std::atomic<int> flags[16];
};

inline Board* NewBoard() {
  void* p = mmap(nullptr, sizeof(Board), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  std::memset(p, 0, sizeof(Board));
  return static_cast<Board*>(p);
}

// Waits (at most timeout_ms) until pred holds; whether it did.
inline bool WaitUntil(const std::function<bool()>& pred, int timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Rank 0 makes id number `slot`; everyone gets it.
inline bool ShareId(const Api& api, Board* b, int rank, int slot,
                    ncclUniqueId* id) {
  if (rank == 0) {
    if (api.ncclGetUniqueId(&b->ids[slot]) != ncclSuccess) return false;
    b->id_ready[slot].store(1);
  }
  if (!WaitUntil([&] { return b->id_ready[slot].load() == 1; }, 10000)) {
    return false;
  }
  *id = b->ids[slot];
  return true;
}

// In a child: device `rank` current, then a blocking communicator of n
// ranks from the board's id 0. Says which step failed.
inline bool InitComm(const Api& api, Board* b, int rank, int n,
                     ncclComm_t* comm) {
  ncclUniqueId id;
  const char* failed = nullptr;
  if (api.cudaSetDevice(rank) != cudaSuccess) {
    failed = "cudaSetDevice";
  } else if (!ShareId(api, b, rank, 0, &id)) {
    failed = "ShareId";
  } else if (api.ncclCommInitRank(comm, n, id, rank) != ncclSuccess) {
    failed = "ncclCommInitRank";
  }
  if (failed != nullptr) std::fprintf(stderr, "InitComm: %s failed\n", failed);
  return failed == nullptr;
}

inline int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace dksim_test

#endif  // DISTKIT_TESTING_GPU_SIM_SIM_TEST_UTIL_H_
