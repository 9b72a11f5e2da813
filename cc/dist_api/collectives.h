// The tensor collectives of mmengine.dist, in C++: a world size of 1 (or not
// being distributed) is a no-op or returns [data]; `group` nullptr is the
// default group; ops are named as in mmengine ("sum", "mean", ...,
// case-insensitive). Buffers are caller-allocated TensorRefs.

#ifndef DISTKIT_CC_DIST_API_COLLECTIVES_H_
#define DISTKIT_CC_DIST_API_COLLECTIVES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/core/reduce_op.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/process_group.h"

namespace distkit {
namespace dist {

// In place. `op` by name; "mean" on integers truncates toward zero.
absl::Status AllReduce(TensorRef data, absl::string_view op = "sum",
                       ProcessGroup* group = nullptr);

// outputs[r] receives rank r's data (outputs.size() == world size).
absl::Status AllGather(TensorRef data, const std::vector<TensorRef>& outputs,
                       ProcessGroup* group = nullptr);

// On `dst`, outputs[r] receives rank r's data; other ranks pass no outputs.
absl::Status Gather(TensorRef data, const std::vector<TensorRef>& outputs,
                    int dst = 0, ProcessGroup* group = nullptr);

// In place, from `src`.
absl::Status Broadcast(TensorRef data, int src = 0,
                       ProcessGroup* group = nullptr);

// Every rank draws a seed in [0, 2^31); rank 0's draw (an int32) is broadcast
// and returned everywhere. World size 1 returns the local draw.
absl::StatusOr<int32_t> SyncRandomSeed(ProcessGroup* group = nullptr);

// mmengine's all_reduce_dict: keys in sorted order (a std::map), values
// flattened into one buffer, one all_reduce, results written back. All values
// must share a dtype.
absl::Status AllReduceDict(const std::map<std::string, TensorRef>& data,
                           absl::string_view op = "sum",
                           ProcessGroup* group = nullptr);

// mmengine's all_reduce_params. coalesce=false: one all_reduce per tensor.
// coalesce=true: buckets by dtype (bucket_size_mb <= 0: one bucket per dtype in
// first-seen order; > 0: a bucket is closed when the next tensor would pass the
// limit, as torch's _take_tensors does), each flattened, all-reduced and
// copied back.
absl::Status AllReduceParams(const std::vector<TensorRef>& params,
                             bool coalesce = true, int bucket_size_mb = -1,
                             absl::string_view op = "sum",
                             ProcessGroup* group = nullptr);
// The same with the op already parsed (the C ABI's entry point).
absl::Status AllReduceParams(const std::vector<TensorRef>& params,
                             bool coalesce, int bucket_size_mb, ReduceOp op,
                             ProcessGroup* group);

// The buckets AllReduceParams would use: indices into `params`.
std::vector<std::vector<size_t>> TakeTensorBuckets(
    const std::vector<TensorRef>& params, int bucket_size_mb);

}  // namespace dist
}  // namespace distkit

#endif  // DISTKIT_CC_DIST_API_COLLECTIVES_H_
