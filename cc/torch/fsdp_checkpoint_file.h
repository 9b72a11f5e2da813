// The sharded checkpoint's files (FullyShardedDataParallel's
// SaveShardedCheckpoint / LoadShardedCheckpoint): one per rank,
// <dir>/shard_rank<R>.pt, a pickled dict of tensors that torch.load reads
// too. Under "unit<U>.meta" each unit's FlatShard metadata is one int64
// tensor; "unit<U>.flat<K>" is the rank's shard of flat buffer K;
// "param.<name>" and "buffer.<name>" hold what is not sharded. Internal.

#ifndef DISTKIT_CC_TORCH_FSDP_CHECKPOINT_FILE_H_
#define DISTKIT_CC_TORCH_FSDP_CHECKPOINT_FILE_H_

#include <ATen/core/ivalue.h>

#include <string>

#include "absl/status/statusor.h"
#include "cc/parallel/flat_shard.h"

namespace distkit {
namespace fsdp_internal {

using ShardFileContents = c10::Dict<std::string, at::Tensor>;

// <dir>/shard_rank<rank>.pt
std::string ShardFile(const std::string& dir, int rank);

// A unit's metadata as one int64 tensor: world size, flat count, then per
// flat its dtype and numel, then the parameter count and numels.
at::Tensor EncodeMetadata(const FlatShard::ShardMetadata& m);
// Back; INVALID_ARGUMENT naming `key` when it is malformed.
absl::StatusOr<FlatShard::ShardMetadata> DecodeMetadata(const at::Tensor& t,
                                                        const std::string& key);

// NOT_FOUND when the file cannot be read, INVALID_ARGUMENT when it is not a
// sharded checkpoint; UNAVAILABLE when it cannot be written.
absl::StatusOr<ShardFileContents> ReadShardFile(const std::string& path);
absl::Status WriteShardFile(const std::string& path,
                            const ShardFileContents& contents);

}  // namespace fsdp_internal
}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_FSDP_CHECKPOINT_FILE_H_
