// A caller's own CUDA stream for the GPU path's tests: non-blocking (as
// torch's side streams are), on a group's device, set as the group's stream
// (ProcessGroup::SetCudaStream) while it lives. A test writes its "backward"
// on it, after a long stretch of device work when the CUDA + NCCL simulator
// provides one (dksimStreamSleep), so that anything distkit does on another
// stream reads the old values every time. Without CUDA's headers at build
// time, Create is FAILED_PRECONDITION.

#ifndef DISTKIT_TESTING_CC_CALLER_STREAM_H_
#define DISTKIT_TESTING_CC_CALLER_STREAM_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace testing {

class CallerStream {
 public:
  static absl::StatusOr<std::unique_ptr<CallerStream>> Create(
      std::shared_ptr<ProcessGroup> group);
  // Waits for the stream, sets the group back to the legacy stream and
  // destroys the stream.
  ~CallerStream();

  // `us` microseconds of device work queued on the stream; false when the
  // CUDA runtime has no way to (a real GPU: no kernels here).
  bool Sleep(long us);
  // Host to device, queued on the stream (the host bytes are staged before
  // it returns).
  absl::Status Write(void* dst, const void* host, size_t n);
  // Device to host on the stream, waited for.
  absl::Status Read(void* host, const void* src, size_t n);

  struct State;

 private:
  explicit CallerStream(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_CALLER_STREAM_H_
