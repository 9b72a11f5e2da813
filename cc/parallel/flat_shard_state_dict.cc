// FlatShard's state dicts: the full parameters gathered or loaded, and a
// sharded checkpoint's pieces loaded at any world size (flat_shard.h).

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/core/device_staging.h"
#include "cc/core/host_staging.h"
#include "cc/core/status.h"
#include "cc/parallel/flat_shard.h"
#include "cc/parallel/flat_shard_flat.h"

namespace distkit {

using flat_shard_internal::Allocate;
using flat_shard_internal::Owned;

// ---- State dicts ------------------------------------------------------------

absl::Status FlatShard::GatherFullParams(const std::vector<TensorRef>& outs,
                                         bool rank0_only) {
  const CopyStreamScope on_stream = OnCallerStream();
  // rank0_only: the job's rank 0 alone writes, so every other rank may pass
  // empty outputs. Every node still gathers to its group's rank 0 (which
  // replica rank a node's ranks have is not ours to assume); the other
  // nodes' roots drop what they gathered.
  const bool root = group_->rank() == 0;
  const bool writes = !rank0_only || JobRank0();
  absl::Status first_error;
  for (size_t k = 0; k < flats_.size(); ++k) {
    Flat& f = *flats_[k];
    Owned full;
    TensorRef gathered = f.shard.view;
    if (shard_count_ > 1) {
      if (root || !rank0_only) {
        DK_ASSIGN_OR_RETURN(full, Allocate(shard_device_, f.dtype, f.padded));
      }
      // The shard may be in host memory (offload_params): staged.
      DK_RETURN_IF_ERROR(
          InOutOnCommDevice(f.shard.view, full.view, group_->comm_device(),
                            [&](const TensorRef& in, const TensorRef& out) {
                              return rank0_only ? group_->Gather(in, out, 0)
                                                : group_->AllGather(in, out);
                            }));
      gathered = full.view;
    }
    if (!writes) continue;
    for (size_t i = 0; i < placements_.size(); ++i) {
      const Placement& p = placements_[i];
      if (p.flat != static_cast<int>(k)) continue;
      if (i >= outs.size() || outs[i].dtype() != f.dtype ||
          outs[i].numel() != p.numel || outs[i].data() == nullptr) {
        if (first_error.ok()) {
          first_error = absl::InvalidArgumentError(
              absl::StrCat("FlatShard: the output for ", names_[i], " must be ",
                           DataTypeName(f.dtype), " x ", p.numel));
        }
        continue;
      }
      DK_RETURN_IF_ERROR(CopyBytes(outs[i].data(), outs[i].device(),
                                   gathered.Slice(p.offset, p.numel).data(),
                                   shard_device_, outs[i].nbytes()));
    }
  }
  return first_error;
}

absl::Status FlatShard::LoadFullParams(const std::vector<TensorRef>& values,
                                       bool rank0_only,
                                       const absl::Status& values_error) {
  const CopyStreamScope on_stream = OnCallerStream();
  {
    absl::MutexLock lock(&mu_);
    if (unsharded_ || gathering_) {
      return absl::FailedPreconditionError(
          "FlatShard: load a state dict while unsharded");
    }
  }
  return FillShards(values, rank0_only, values_error);
}

FlatShard::ShardMetadata FlatShard::Metadata() const {
  ShardMetadata m;
  m.world_size = shard_count_;
  for (const auto& f : flats_) {
    m.flat_dtypes.push_back(f->dtype);
    m.flat_numel.push_back(f->numel);
  }
  bool any_frozen = false;
  for (const Placement& p : placements_) {
    m.param_numel.push_back(p.numel);
    any_frozen = any_frozen || flats_[p.flat]->frozen;
  }
  for (size_t i = 0; any_frozen && i < placements_.size(); ++i) {
    m.param_frozen.push_back(flats_[placements_[i].flat]->frozen ? 1 : 0);
  }
  return m;
}

absl::Status FlatShard::LoadShardedParams(
    const ShardMetadata& saved,
    const std::function<absl::StatusOr<TensorRef>(int flat, int rank)>& read) {
  const CopyStreamScope on_stream = OnCallerStream();
  {
    // As LoadFullParams: the full parameters would keep the old values.
    absl::MutexLock lock(&mu_);
    if (unsharded_ || gathering_) {
      return absl::FailedPreconditionError(
          "FlatShard: load a sharded checkpoint while unsharded");
    }
  }
  const ShardMetadata mine = Metadata();
  // Which parameters are frozen decides which flat buffer each lies in: a
  // checkpoint whose parameters were frozen otherwise has the same sizes
  // and flat buffers but other values in them.
  if (saved.param_numel == mine.param_numel &&
      saved.param_frozen != mine.param_frozen) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FlatShard: the checkpoint's unit has other parameters frozen (",
        saved.param_frozen.empty() ? "none" : "some",
        " when saved; frozen parameters have flat buffers of their own since "
        "ABI 0.13, so a checkpoint saved before that of a unit with frozen "
        "parameters loads only as a full state dict)"));
  }
  if (saved.param_numel != mine.param_numel ||
      saved.flat_dtypes != mine.flat_dtypes ||
      saved.flat_numel != mine.flat_numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("FlatShard: the checkpoint is of another unit (",
                     saved.param_numel.size(), " parameters in ",
                     saved.flat_dtypes.size(), " flat buffers; this unit has ",
                     mine.param_numel.size(), " in ", mine.flat_dtypes.size(),
                     saved.param_numel.size() == mine.param_numel.size()
                         ? ", with different sizes or dtypes)"
                         : ")"));
  }
  if (saved.world_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FlatShard: the checkpoint's world size is ", saved.world_size));
  }
  // Every part is read before any shard changes: a read that fails (a
  // missing or wrong file) leaves the unit as it was.
  std::vector<std::vector<char>> staged(flats_.size());
  for (size_t k = 0; k < flats_.size(); ++k) {
    Flat& f = *flats_[k];
    const int64_t w = saved.world_size;
    const int64_t saved_padded =
        std::max<int64_t>(w, (f.numel + w - 1) / w * w);
    const int64_t saved_shard = saved_padded / w;
    const size_t es = ElementSize(f.dtype);
    staged[k].assign(f.shard_numel * es, 0);
    char* dst = staged[k].data();
    const int64_t begin = shard_rank_ * f.shard_numel;
    const int64_t end = std::min(begin + f.shard_numel, f.numel);
    for (int64_t pos = begin; pos < end;) {
      const int r = static_cast<int>(pos / saved_shard);
      const int64_t r_begin = r * saved_shard;
      const int64_t upto = std::min(end, r_begin + saved_shard);
      DK_ASSIGN_OR_RETURN(TensorRef part, read(static_cast<int>(k), r));
      if (part.dtype() != f.dtype || part.numel() != saved_shard ||
          !part.device().is_cpu()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "FlatShard: saved shard ", r, " of flat buffer ", k, " must be ",
            DataTypeName(f.dtype), " x ", saved_shard, " in host memory"));
      }
      std::memcpy(dst + (pos - begin) * es,
                  static_cast<const char*>(part.data()) + (pos - r_begin) * es,
                  (upto - pos) * es);
      pos = upto;
    }
  }
  for (size_t k = 0; k < flats_.size(); ++k) {
    DK_ASSIGN_OR_RETURN(HostCopy mine_host,
                        HostCopy::Of(flats_[k]->shard.view, /*read=*/false));
    std::memcpy(mine_host.host().data(), staged[k].data(), staged[k].size());
    DK_RETURN_IF_ERROR(mine_host.WriteBack());
  }
  return absl::OkStatus();
}

}  // namespace distkit
