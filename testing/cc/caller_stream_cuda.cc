#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "cc/core/cuda_library.h"
#include "cc/core/status.h"
#include "testing/cc/caller_stream.h"

namespace distkit {
namespace testing {

struct CallerStream::State {
  std::shared_ptr<ProcessGroup> group;
  const CudaLibrary* cuda = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;
  // The simulator's dksimStreamSleep, found in the loaded runtime.
  cudaError_t (*sleep)(cudaStream_t, long) = nullptr;
};

CallerStream::CallerStream(std::unique_ptr<State> state)
    : state_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<CallerStream>> CallerStream::Create(
    std::shared_ptr<ProcessGroup> group) {
  auto s = std::make_unique<State>();
  DK_ASSIGN_OR_RETURN(s->cuda, LoadCudaLibrary());
  const Device device = group->comm_device();
  if (!device.is_cuda()) {
    return absl::FailedPreconditionError("the group has no CUDA device");
  }
  s->device = device.index;
  s->group = std::move(group);
  CudaDeviceGuard on(*s->cuda, s->device);
  DK_RETURN_IF_ERROR(on.status());
  DK_RETURN_IF_ERROR(CudaStatus(
      *s->cuda,
      s->cuda->StreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
      "cudaStreamCreateWithFlags"));
  if (void* lib = dlopen(s->cuda->path.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    s->sleep = reinterpret_cast<cudaError_t (*)(cudaStream_t, long)>(
        dlsym(lib, "dksimStreamSleep"));
    dlclose(lib);
  }
  DK_RETURN_IF_ERROR(s->group->SetCudaStream(s->stream));
  return std::unique_ptr<CallerStream>(new CallerStream(std::move(s)));
}

CallerStream::~CallerStream() {
  State& s = *state_;
  CudaDeviceGuard on(*s.cuda, s.device);
  s.cuda->StreamSynchronize(s.stream);
  s.group->SetCudaStream(nullptr).IgnoreError();
  s.cuda->StreamDestroy(s.stream);
}

bool CallerStream::Sleep(long us) {
  if (state_->sleep == nullptr) return false;
  CudaDeviceGuard on(*state_->cuda, state_->device);
  return on.status().ok() && state_->sleep(state_->stream, us) == cudaSuccess;
}

absl::Status CallerStream::Write(void* dst, const void* host, size_t n) {
  const State& s = *state_;
  CudaDeviceGuard on(*s.cuda, s.device);
  DK_RETURN_IF_ERROR(on.status());
  return CudaStatus(
      *s.cuda,
      s.cuda->MemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, s.stream),
      "cudaMemcpyAsync");
}

absl::Status CallerStream::Read(void* host, const void* src, size_t n) {
  const State& s = *state_;
  CudaDeviceGuard on(*s.cuda, s.device);
  DK_RETURN_IF_ERROR(on.status());
  DK_RETURN_IF_ERROR(CudaStatus(
      *s.cuda,
      s.cuda->MemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, s.stream),
      "cudaMemcpyAsync"));
  return CudaStatus(*s.cuda, s.cuda->StreamSynchronize(s.stream),
                    "cudaStreamSynchronize");
}

}  // namespace testing
}  // namespace distkit
