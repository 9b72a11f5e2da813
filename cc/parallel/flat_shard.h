// FlatShard: one sharded unit of fully sharded data parallelism (FSDP),
// independent of any framework (the LibTorch and Python wrappers and the
// ABI's dk_shard_* drive this class on their own buffers).
//
// A unit's parameters are flattened into one buffer per dtype (in the order
// the dtypes first appear; frozen parameters, which take no gradient, into
// buffers of their own, so that an optimizer given the shards never moves
// them: its weight decay would), padded with zeros to a multiple of the shard
// group's size N, and split: rank r keeps elements [r*S, (r+1)*S) of each,
// S = padded / N, as float master values ("the shard"). Per iteration:
//   1. StartUnshard / WaitUnshard (or Unshard): all-gather the full
//      parameters, in param_dtype, into a buffer the unit owns; FullParam(i)
//      is parameter i's view of it. Start early to overlap compute (prefetch).
//   2. Reshard: free that buffer (after forward under FULL_SHARD, after
//      backward under SHARD_GRAD_OP; never under NO_SHARD).
//   3. AccumulateGrad(i, grad) (or write FullGrad(i)) during backward, then
//      ReduceScatterGrads: every rank's gradients averaged over the whole job
//      into this rank's shard gradient (ShardGrad), which accumulates until
//      ZeroShardGrads. While require_sync is false (no_sync) the full
//      gradients accumulate locally instead, and the next synchronized call
//      reduces the sum.
//   4. The optimizer steps on Shard(k) with ShardGrad(k).
//
// Strategies (torch's ShardingStrategy):
//   kFullShard, kShardGradOp      shard over the group;
//   kNoShard                      the shard is the whole parameter: gradients
//                                 are all-reduced, as DDP does;
//   kHybridShard, kHybridShardZero2  shard inside `group` (one node), and
//                                 all-reduce the shard gradient across
//                                 `options.replicate_group` (one rank per
//                                 node).
// The average divides by the number of ranks that hold a replica of the
// whole model (N, or N x replicas), before summing, as torch's FSDP does with
// its pre-divide so that half-precision sums do not overflow.

#ifndef DISTKIT_CC_PARALLEL_FLAT_SHARD_H_
#define DISTKIT_CC_PARALLEL_FLAT_SHARD_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "cc/core/copy_stream.h"
#include "cc/core/data_type.h"
#include "cc/core/device.h"
#include "cc/core/device_copy.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/process_group.h"

namespace distkit {

enum class ShardingStrategy {
  kFullShard = 0,
  kShardGradOp = 1,
  kNoShard = 2,
  kHybridShard = 3,
  kHybridShardZero2 = 4,
};

// "FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
// "_HYBRID_SHARD_ZERO2" (torch's enum member names).
absl::string_view ShardingStrategyName(ShardingStrategy strategy);
absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name);
// Whether the full parameters are freed after forward (FULL_SHARD and
// HYBRID_SHARD) rather than kept for backward.
bool ReshardsAfterForward(ShardingStrategy strategy);

class FlatShard {
 public:
  struct Options {
    ShardingStrategy strategy = ShardingStrategy::kFullShard;
    // Mixed precision (torch's MixedPrecision). param_dtype: gather and
    // compute in it; unset: the parameters' own dtype. reduce_dtype: reduce
    // gradients in it; unset: param_dtype.
    std::optional<DataType> param_dtype;
    std::optional<DataType> reduce_dtype;
    // CPUOffload(offload_params=True): the shard and its gradient live in
    // host memory; full parameters and gradients on the parameters' device.
    bool offload_params = false;
    // Broadcast rank 0's values before sharding (over the replicate group
    // too), so every replica starts equal.
    bool sync_module_states = false;
    // HYBRID_*: one rank of every other node holding the same shard.
    std::shared_ptr<ProcessGroup> replicate_group;
  };

  struct Parameter {
    TensorRef data;    // the full initial value; read by Create, not kept
    std::string name;  // for error messages
    // Takes no gradient (torch's requires_grad=False): sharded and gathered
    // as the others, in a flat buffer of frozen parameters, which has no
    // gradient buffers (ShardGrad empty) and no reduction.
    bool frozen = false;
  };

  // Where parameter `index` lies in the flat buffer of its dtype.
  struct Placement {
    int flat = 0;        // which flat buffer (dtype and frozen group)
    int64_t offset = 0;  // element offset inside it
    int64_t numel = 0;
  };

  // Collective over `group` (and the replicate group). Every rank must
  // register the same parameters (count, dtype, element count and frozen,
  // in order),
  // else INVALID_ARGUMENT on every rank naming the first difference and the
  // ranks; then (sync_module_states) rank 0's values are broadcast and each
  // rank keeps its slice. Parameters must be floating point.
  static absl::StatusOr<std::unique_ptr<FlatShard>> Create(
      std::shared_ptr<ProcessGroup> group, std::vector<Parameter> params,
      Options options);
  ~FlatShard();

  // ---- Parameters -----------------------------------------------------------

  // Starts the all-gather of the full parameters (no-op when they are
  // already gathered or on their way). Collective: every rank starts the
  // same units in the same order.
  absl::Status StartUnshard();
  // Waits for StartUnshard's gather.
  absl::Status WaitUnshard();
  absl::Status Unshard();  // StartUnshard + WaitUnshard
  // Frees the full parameters (waits for a gather in flight first). Under
  // NO_SHARD without a param_dtype they are the shard itself and stay.
  absl::Status Reshard();
  bool is_unsharded() const;

  // Parameter `index`'s full value, in param_dtype, valid until Reshard.
  absl::StatusOr<TensorRef> FullParam(int index) const;
  // Flat buffer `flat`'s whole gathered buffer (padded), valid until Reshard
  // (framework wrappers alias their parameters into it).
  absl::StatusOr<TensorRef> FullFlat(int flat) const;

  // ---- Gradients ------------------------------------------------------------

  // Adds `grad` (parameter `index`'s full gradient, any floating dtype, same
  // element count) into the unit's full gradient buffer. A frozen parameter
  // has none: FAILED_PRECONDITION (FullGrad too).
  absl::Status AccumulateGrad(int index, TensorRef grad);
  // Where backward may write (add) parameter `index`'s gradient directly:
  // param_dtype, zeroed at the first call of an iteration, valid until the
  // synchronized ReduceScatterGrads.
  absl::StatusOr<TensorRef> FullGrad(int index);
  // Averages the full gradients over every rank into this rank's shard
  // gradient and frees the full gradients (collective; parameters given no
  // gradient count as zero). With require_sync false: keeps them instead.
  absl::Status ReduceScatterGrads();
  // The same in two halves, so the reduction overlaps the rest of backward:
  // Start hands the full gradients to an asynchronous reduce-scatter (or
  // all-reduce) and returns; Wait adds the result into the shard gradient
  // (ShardGrad is stale until then). One reduction in flight per unit; a new
  // backward may write full gradients meanwhile (into new buffers).
  absl::Status StartReduceScatterGrads();
  absl::Status WaitReduceScatterGrads();
  // Frees the full gradients not yet handed to a reduction (also those
  // accumulated under no_sync), so that the next FullGrad starts from zero:
  // after a failed backward they hold a partial sum. A reduction in flight
  // is not touched.
  void DiscardFullGrads();
  bool is_reducing() const;
  void set_require_sync(bool require_sync);
  bool require_sync() const;

  // ---- The shard (what the optimizer steps) ---------------------------------

  int num_flat() const { return static_cast<int>(flats_.size()); }
  bool flat_frozen(int flat) const;
  // Flat buffer k's local shard (master values, the parameters' dtype) and
  // its gradient (same dtype; zero until the first ReduceScatterGrads; empty
  // for a buffer of frozen parameters).
  TensorRef Shard(int flat) const;
  TensorRef ShardGrad(int flat) const;
  void ZeroShardGrads();
  // The part of parameter `index` this rank holds: its element range inside
  // the parameter and views into Shard / ShardGrad (numel 0 when none).
  struct LocalPiece {
    int64_t param_offset = 0;
    int64_t numel = 0;
    TensorRef data;
    TensorRef grad;
  };
  LocalPiece Piece(int index) const;

  // ---- State dicts ----------------------------------------------------------

  // Full state dict: parameter i's full master value into outs[i] (same
  // dtype and numel, host or device). rank0_only: only the job's rank 0
  // writes (rank 0 of the group and, under HYBRID_*, of the replicate group;
  // others may pass empty TensorRefs). Collective.
  absl::Status GatherFullParams(const std::vector<TensorRef>& outs,
                                bool rank0_only = false);
  // Loads a full state dict: every rank passes every parameter's full value
  // (or, rank0_only, only rank 0 does and its values are broadcast) and
  // keeps its slice. Collective with rank0_only, local otherwise.
  // `values_error`: why the caller could not read its values (`values` then
  // empty). It fails the load where the values are used, and with
  // rank0_only rank 0's reaches every rank, so that none waits for a
  // broadcast that will not come; the other ranks' is ignored.
  absl::Status LoadFullParams(
      const std::vector<TensorRef>& values, bool rank0_only = false,
      const absl::Status& values_error = absl::OkStatus());

  // Sharded state dict: what this rank saves (its shards) and the metadata
  // that lets a job of another size load them.
  struct ShardMetadata {
    int world_size = 0;                 // shard group size when saved
    std::vector<DataType> flat_dtypes;  // per flat buffer
    std::vector<int64_t> flat_numel;    // unpadded, per flat buffer
    std::vector<int64_t> param_numel;   // per parameter, in order
    // Per parameter, 1 where it is frozen (which decides its flat buffer);
    // empty where none is (and in checkpoints saved before frozen
    // parameters had flat buffers of their own).
    std::vector<int64_t> param_frozen;
  };
  ShardMetadata Metadata() const;
  // Re-shards a checkpoint saved at any shard-group size: `read(flat, rank)`
  // returns saved rank `rank`'s shard of flat buffer `flat` (host memory,
  // valid until the next call). Only the saved shards that overlap this
  // rank's range are read. A checkpoint of another unit (parameter count,
  // sizes or dtypes) is INVALID_ARGUMENT naming the difference; while
  // unsharded FAILED_PRECONDITION (as LoadFullParams). Everything is read
  // before anything is written: a failed read changes nothing. Local.
  absl::Status LoadShardedParams(
      const ShardMetadata& saved,
      const std::function<absl::StatusOr<TensorRef>(int flat, int rank)>& read);

  // ---- Introspection --------------------------------------------------------

  const Options& options() const { return options_; }
  int num_params() const { return static_cast<int>(placements_.size()); }
  const Placement& placement(int index) const { return placements_[index]; }
  const std::string& param_name(int index) const { return names_[index]; }
  int shard_count() const { return shard_count_; }  // N (1 under NO_SHARD)
  int shard_rank() const { return shard_rank_; }
  // Bytes this unit holds now: shards, shard gradients, full parameters and
  // full gradients (for memory accounting; the peak is tracked too).
  size_t held_bytes() const;
  size_t peak_held_bytes() const;

  // When each unshard and reduction was started and finished, relative to
  // Create, so a trace can show prefetched gathers overlapping compute. The
  // unit keeps the newest kMaxEvents events not yet taken (older ones are
  // dropped: a job that never reads them does not grow).
  struct Event {
    enum Kind {
      kUnshardStart,
      kUnshardDone,
      kReshard,
      kReduceStart,
      kReduceDone
    } kind;
    absl::Duration at;
  };
  static constexpr size_t kMaxEvents = 4096;
  // Removes and returns the oldest `max` events (all by default), in order.
  std::vector<Event> TakeEvents(size_t max = kMaxEvents);
  // What Event::at is relative to.
  absl::Time created_at() const { return created_at_; }

  // Tests only: the n-th buffer allocation from now (any unit of this
  // process) fails with RESOURCE_EXHAUSTED; 0 disarms.
  static void FailAllocationForTesting(int n);

 private:
  // Copies on the group's caller stream for a call (copy_stream.h): ordered
  // with the caller's work and the group's collectives, not the legacy
  // stream's.
  CopyStreamScope OnCallerStream() const {
    return CopyStreamScope(group_->comm_device(), group_->cuda_stream());
  }
  struct Flat;
  FlatShard(std::shared_ptr<ProcessGroup> group, Options options);

  absl::Status Place(const std::vector<Parameter>& params);
  absl::Status AllocateShards();
  // Rank 0 of the group and, if any, of the replicate group.
  bool JobRank0() const;
  absl::Status FillShards(const std::vector<TensorRef>& values, bool from_rank0,
                          const absl::Status& values_error = absl::OkStatus());
  absl::Status EnsureFullGrads();
  // The launching halves of StartUnshard / StartReduceScatterGrads; on an
  // error the caller waits for what they launched.
  absl::Status StartUnshardLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StartReduceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Record(Event::Kind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t HeldBytesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Account() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DataType ComputeDtype(const Flat& f) const;
  DataType ReduceDtype(const Flat& f) const;

  const std::shared_ptr<ProcessGroup> group_;
  const Options options_;
  int shard_count_ = 1;
  int shard_rank_ = 0;
  int replicas_ = 1;  // replicate group size (hybrid), else 1
  Device param_device_;
  Device shard_device_;

  std::vector<Placement> placements_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Flat>> flats_;

  mutable absl::Mutex mu_;
  bool unsharded_ ABSL_GUARDED_BY(mu_) = false;
  bool gathering_ ABSL_GUARDED_BY(mu_) = false;
  bool grads_live_ ABSL_GUARDED_BY(mu_) = false;
  bool reducing_ ABSL_GUARDED_BY(mu_) = false;
  bool require_sync_ ABSL_GUARDED_BY(mu_) = true;
  size_t peak_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time created_at_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_PARALLEL_FLAT_SHARD_H_
