// Collectives on byte strings of any size (serialized objects: the Python
// binding pickles, other languages bring their own encoding). As in
// mmengine's fallback and torch's own path: sizes are all-gathered first,
// every buffer is padded to the largest, one all_gather (or gather) moves the
// data, and each receiver slices every entry to its true size.

#ifndef DISTKIT_CC_DIST_API_OBJECT_COLLECTIVES_H_
#define DISTKIT_CC_DIST_API_OBJECT_COLLECTIVES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace dist {

// Every rank's bytes, in rank order. World size 1: {data}.
absl::StatusOr<std::vector<std::string>> AllGatherObject(
    const std::string& data, ProcessGroup* group = nullptr);

// On `dst`: every rank's bytes in rank order; other ranks: nullopt (mmengine's
// None). World size 1: {data}.
absl::StatusOr<std::optional<std::vector<std::string>>> GatherObject(
    const std::string& data, int dst = 0, ProcessGroup* group = nullptr);

// In place: every rank's list becomes `src`'s (the list length too). No-op
// when not distributed.
absl::Status BroadcastObjectList(std::vector<std::string>* objects, int src = 0,
                                 ProcessGroup* group = nullptr);

}  // namespace dist
}  // namespace distkit

#endif  // DISTKIT_CC_DIST_API_OBJECT_COLLECTIVES_H_
