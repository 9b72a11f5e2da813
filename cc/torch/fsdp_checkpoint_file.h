// The sharded checkpoint's files (FullyShardedDataParallel's
// SaveShardedCheckpoint / LoadShardedCheckpoint), in the format Python's
// distkit.fsdp writes and reads too (bindings/python/distkit/fsdp/
// checkpoint_format.py; docs/architecture.md, "Sharded checkpoints"): one
// file per rank of the shard group, <dir>/shard_rank<R>.pt, a pickled dict
// of CPU tensors (torch::pickle_save; Python's torch.load reads it, and
// torch::pickle_load reads Python's torch.save of such a dict). Its keys:
//
//   unit[<path>].meta     int64: world size, F, then per flat buffer its
//                         dk_dtype_t code and element count (unpadded), then
//                         P and each of the unit's P parameters' counts
//   unit[<path>].flat<k>  this rank's shard of the unit's flat buffer k
//   param.<name>          a parameter no unit holds, whole
//   buffer.<name>         a buffer, whole
//
// <path> is the unit's module path in the wrapped module ("" for the root:
// "unit[].meta"), so units are found by name, whatever order a language
// builds them in. Internal.

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

// The keys above.
std::string MetaKey(const std::string& unit);
std::string FlatKey(const std::string& unit, int flat);
std::string ParamKey(const std::string& name);
std::string BufferKey(const std::string& name);
// How many units' metadata `contents` holds.
size_t CountUnits(const ShardFileContents& contents);

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
