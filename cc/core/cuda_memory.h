// CUDA memory for device_copy.cc, in two builds: cuda_memory_cuda.cc (CUDA's
// headers found: the runtime opened at first use, cuda_library.h) and
// cuda_memory_none.cc (no CUDA: every call FAILED_PRECONDITION saying so).
// Internal to cc/core; callers use device_copy.h.

#ifndef DISTKIT_CC_CORE_CUDA_MEMORY_H_
#define DISTKIT_CC_CORE_CUDA_MEMORY_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "cc/core/copy_stream.h"
#include "cc/core/device.h"

namespace distkit {
namespace cuda_memory {

// The device count, or why there is none (computed once per process).
const absl::StatusOr<int>& DeviceCount();

// `n` bytes between host and CUDA memory, either way or device to device;
// at least one side is a CUDA device, both are usable (checked by caller).
absl::Status Copy(void* dst, Device dst_device, const void* src,
                  Device src_device, size_t n);

// The same, queued on `on` (whose device is one of the two sides):
// device to device not waited for; with host memory on a side, waited for.
absl::Status CopyOnStream(void* dst, Device dst_device, const void* src,
                          Device src_device, size_t n, const CopyStream& on);

// `n` zero bytes at `dst` on CUDA `device`, on the device (cudaMemsetAsync):
// on the legacy stream and waited for, or queued on `on` (its device is
// `device`) and not waited for, as a device to device copy.
absl::Status Zero(void* dst, Device device, size_t n);
absl::Status ZeroOnStream(void* dst, Device device, size_t n,
                          const CopyStream& on);

// Waits for the work queued on `stream` (nullptr: the legacy one) of
// `device`.
absl::Status SynchronizeStream(Device device, void* stream);

absl::StatusOr<void*> Allocate(Device device, size_t bytes);
// Frees on the allocation's own device, so a thread on another device does
// not put a context there.
void Free(Device device, void* p);

}  // namespace cuda_memory
}  // namespace distkit

#endif  // DISTKIT_CC_CORE_CUDA_MEMORY_H_
