// The caller's CUDA stream for copies: while a CopyStreamScope is open on a
// thread, CopyBytes (and the staging helpers built on it) queue every copy
// that touches the scope's device on the scope's stream instead of copying
// on the legacy default stream and waiting. So a gradient made on the
// caller's stream (torch's current stream, often non-blocking) is read
// after it is written, the collective that follows (which waits on that
// stream from where it stood when issued) reads the copy, and the caller's
// later work reads what is copied back, with the host waiting only where it
// must:
//   - device to device: queued, not waited for;
//   - to or from host memory: waited for (the host reads the result, or may
//     reuse its buffer, which is not staged when it is pinned);
//   - releasing a DeviceBuffer of the scope's device waits for the stream
//     first, since the block cache hands the memory out again at once and
//     work queued on the stream may still read or write it.
// Copies that do not touch the scope's device, and every copy outside a
// scope, are blocking as before (device_copy.h). The GradReducer and
// FlatShard open one per call with their group's stream
// (ProcessGroup::cuda_stream).

#ifndef DISTKIT_CC_CORE_COPY_STREAM_H_
#define DISTKIT_CC_CORE_COPY_STREAM_H_

#include <optional>

#include "absl/status/status.h"
#include "cc/core/device.h"

namespace distkit {

// A stream of one CUDA device; `stream` nullptr: its legacy default stream.
struct CopyStream {
  Device device;
  void* stream = nullptr;  // a cudaStream_t
};

class CopyStreamScope {
 public:
  // Opens nothing unless `device` is a CUDA device. Scopes nest: the inner
  // one holds until it closes.
  CopyStreamScope(Device device, void* stream);
  ~CopyStreamScope();
  CopyStreamScope(const CopyStreamScope&) = delete;
  CopyStreamScope& operator=(const CopyStreamScope&) = delete;

 private:
  std::optional<CopyStream> previous_;
  bool opened_ = false;
};

// The calling thread's open scope's stream, if it applies to `device`.
std::optional<CopyStream> CopyStreamFor(Device device);

// Waits until the work queued on the calling thread's scope stream is done
// (OK without a scope).
absl::Status SynchronizeCopyStream();

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_COPY_STREAM_H_
