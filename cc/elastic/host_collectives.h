// The collectives a snapshot makes, on host buffers: staged through the
// group's comm device where that is not the host (NCCL's), so snapshots
// work on every backend. Also the allocation a snapshot's copies use, whose
// failure is an error, not an exception, and the agreement that makes a
// failure before a collective step an error on every member at once.

#ifndef DISTKIT_CC_ELASTIC_HOST_COLLECTIVES_H_
#define DISTKIT_CC_ELASTIC_HOST_COLLECTIVES_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
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

// For tests: AllocateHost fails, as out of memory, for more than `bytes` in
// this process (negative: no limit, the default).
void SetHostAllocationLimitForTesting(int64_t bytes);

// Whether every member is ready for the collective step that follows:
// `mine` is this member's outcome of what it did first (an allocation for
// the step). Every member takes part even where its own failed, so that a
// failure on one is an error on all at once, naming it, instead of the
// others waiting for it until the op timeout. This member's own error where
// it failed; else, where another failed, that member's status code with a
// message naming `what`, the group and the failed members. Nothing moved,
// so the group stays usable.
absl::Status AgreeReady(ProcessGroup& group, const absl::Status& mine,
                        absl::string_view what);

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
