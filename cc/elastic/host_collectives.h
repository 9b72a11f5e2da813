// The collectives a snapshot makes, on host buffers: staged through the
// group's comm device where that is not the host (NCCL's), so snapshots
// work on every backend. Also the allocation a snapshot's copies use, whose
// failure is an error, not an exception.

#ifndef DISTKIT_CC_ELASTIC_HOST_COLLECTIVES_H_
#define DISTKIT_CC_ELASTIC_HOST_COLLECTIVES_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cc/core/data_type.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace elastic {

// Host memory from AllocateHost, released with free().
struct FreeHost {
  void operator()(char* p) const { std::free(p); }
};
using HostBuffer = std::unique_ptr<char[], FreeHost>;

// Every snapshot buffer starts on this boundary, so any element type (and a
// caller's aligned vector loads) may view it.
inline constexpr size_t kHostAlign = 64;

// `bytes` (at least one) of host memory at a kHostAlign boundary, left
// uninitialised (the caller writes every byte it reads), or
// RESOURCE_EXHAUSTED naming `what`.
absl::StatusOr<HostBuffer> AllocateHost(int64_t bytes, const char* what);

// `count` elements of `dtype` at `in` from every member into `out` (count
// times the group's size), in rank order.
absl::Status AllGatherHost(ProcessGroup& group, void* in, void* out,
                           int64_t count, DataType dtype);

// `bytes` at `data` from member `root` to every member.
absl::Status BroadcastHost(ProcessGroup& group, void* data, int64_t bytes,
                           int root);

// Bytes to chosen members: input_splits[r] bytes of `in` (in rank order) go
// to member r, output_splits[r] bytes arrive from member r into `out`.
absl::Status AllToAllHost(ProcessGroup& group, void* in, void* out,
                          std::vector<int64_t> input_splits,
                          std::vector<int64_t> output_splits);

}  // namespace elastic
}  // namespace distkit

#endif  // DISTKIT_CC_ELASTIC_HOST_COLLECTIVES_H_
