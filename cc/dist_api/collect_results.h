// mmengine's collect_results on byte items (each item one serialized result;
// an empty item stands for Python's None). Rank r holds the results of
// dataset indices r, r + W, r + 2W, ... (DistributedSampler's round robin,
// padded to a multiple of W); rank 0 gets the results back in dataset order:
// interleaved by rank, empty items dropped, truncated to `size`. Other ranks
// get nullopt.
//
// device "cpu" goes through a directory every rank can reach: `tmpdir`, or
// (when empty) a fresh one that rank 0 makes under ./.dist_test and whose path
// it broadcasts in a 512-byte space-padded buffer. Rank r writes part_<r>.bin
// there (length-prefixed items; from Python, a pickle each), all ranks take
// the least of whether each wrote its part (an error on every rank where one
// could not), rank 0 reads every part and removes the directory, also one
// the caller supplied. "gpu" and
// "npu" gather the parts through the communication backend instead.

#ifndef DISTKIT_CC_DIST_API_COLLECT_RESULTS_H_
#define DISTKIT_CC_DIST_API_COLLECT_RESULTS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace dist {

using ResultItems = std::vector<std::string>;

// device: "cpu", "gpu" or "npu" (anything else is UNIMPLEMENTED, mmengine's
// NotImplementedError); "gpu"/"npu" with a tmpdir, or a negative size, is
// INVALID_ARGUMENT (before any communication).
absl::StatusOr<std::optional<ResultItems>> CollectResults(
    const ResultItems& part, int64_t size, absl::string_view device = "cpu",
    std::optional<std::string> tmpdir = std::nullopt,
    ProcessGroup* group = nullptr);

absl::StatusOr<std::optional<ResultItems>> CollectResultsCpu(
    const ResultItems& part, int64_t size,
    std::optional<std::string> tmpdir = std::nullopt,
    ProcessGroup* group = nullptr);

absl::StatusOr<std::optional<ResultItems>> CollectResultsGpu(
    const ResultItems& part, int64_t size, ProcessGroup* group = nullptr);

// Dataset order from per-rank parts: zip_longest over the parts, empty items
// dropped, truncated to `size`.
ResultItems InterleaveParts(const std::vector<ResultItems>& parts,
                            int64_t size);

}  // namespace dist
}  // namespace distkit

#endif  // DISTKIT_CC_DIST_API_COLLECT_RESULTS_H_
