// Fully sharded data parallelism for LibTorch (whose C++ API has none): the
// model's parameters are split into units (auto_wrap_policy picks the
// submodules that become units; the rest belong to the root unit), each
// unit a FlatShard, so a rank holds 1/N of every parameter, gradient and
// optimizer state, plus the full parameters of the units being computed.
//
// The optimizer sees the original parameters (torch's use_orig_params=True):
// between steps each one is a 1-D view of the part of it this rank holds
// (possibly empty), with its gradient beside it, so any torch::optim
// optimizer steps the shard, and its state is sharded too. During forward and
// backward a unit's parameters are full-shape views of the unit's gathered
// buffer, which is freed again when the unit is done.
//
// A tensor tied under several names (an embedding's weight that is also the
// output projection's) is held once by its unit; FullOptimStateDict keys its
// state by its first name in the wrapped module's named_parameters().
// LibTorch's parameters() lists such a tensor under each name: give the
// optimizer each tensor once, or it steps it twice.
//
//   auto fsdp = FullyShardedDataParallel::Create(
//       model, {.auto_wrap_policy = ModuleTypePolicy({"BlockImpl"})}).value();
//   torch::optim::Adam adam(model->parameters(), 1e-3);   // after Create
//   for (...) {
//     adam.zero_grad();
//     DK_RETURN_IF_ERROR(fsdp->BeforeForward());   // gathers what it must
//     torch::Tensor loss = criterion(model->forward(x), y);
//     DK_RETURN_IF_ERROR(fsdp->Backward(loss));    // reduce-scatters grads
//     adam.step();
//   }
//
// LibTorch has no forward hooks, so a unit cannot gather itself when its
// forward starts. A model lets it by calling its blocks through
// UnitForward (one line; a no-op without FSDP):
//
//   for (auto& block : blocks_)
//     x = distkit::UnitForward(*block, [&] { return block->forward(x); });
//
// A unit whose forward does not go through UnitForward is gathered by
// BeforeForward and kept until its gradients are reduced: always correct,
// but its full parameters are held through the whole forward. (The first
// iteration gathers every unit in BeforeForward; it learns which units the
// model calls through UnitForward.) With UnitForward, FULL_SHARD frees a
// unit after its forward and gathers it again just before its backward
// (prefetching the next one with BACKWARD_PRE), which is what bounds memory
// to about total / N plus the largest units.
//
// Not supported (yet): parameters that do not require grad are left
// unsharded (replicated, like ignored modules); UnitForward takes a forward
// that returns one tensor.

#ifndef DISTKIT_CC_TORCH_FULLY_SHARDED_DATA_PARALLEL_H_
#define DISTKIT_CC_TORCH_FULLY_SHARDED_DATA_PARALLEL_H_

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cc/group/process_group.h"
#include "cc/parallel/flat_shard.h"
#include "cc/torch/distributed_data_parallel.h"

namespace distkit {

// Whether `module` (at `name`, "" for the root) becomes a unit of its own.
// `unwrapped_numel`: elements of its parameters not yet in a unit below it.
using AutoWrapPolicy =
    std::function<bool(const torch::nn::Module& module, const std::string& name,
                       int64_t unwrapped_numel)>;

// torch's ModuleWrapPolicy: modules whose name() (LibTorch: the class name,
// e.g. "torch::nn::LinearImpl") is one of `type_names`; a name without
// namespaces ("BlockImpl") matches the class in any namespace.
AutoWrapPolicy ModuleTypePolicy(std::vector<std::string> type_names);
// torch's size_based_auto_wrap_policy: modules with at least
// `min_num_params` parameter elements not yet wrapped.
AutoWrapPolicy SizeBasedPolicy(int64_t min_num_params);

enum class BackwardPrefetch { kNone, kBackwardPre, kBackwardPost };

struct FsdpOptions {
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;
  // MixedPrecision: gather and compute in param_dtype (inputs must be cast
  // by the model), reduce gradients in reduce_dtype; masters stay in the
  // parameters' dtype.
  std::optional<DataType> param_dtype;
  std::optional<DataType> reduce_dtype;
  // MixedPrecision's buffer_dtype: floating-point buffers live (and forward
  // uses them) in it from Create on; state dicts and checkpoints give them
  // in their own dtype, as torch's full state dict does, and loads convert.
  std::optional<DataType> buffer_dtype;
  bool offload_params = false;  // CPUOffload(offload_params=True)
  bool sync_module_states = false;
  AutoWrapPolicy auto_wrap_policy;  // empty: one unit, the root
  // Which event starts gathering the unit whose backward comes next:
  // kBackwardPre, this unit's pre-backward (the gather overlaps this unit's
  // gradient computation); kBackwardPost, this unit's gradients being
  // complete (issued before this unit's reduction, as torch orders it).
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  // Start gathering the next unit (in the last forward's order) when one
  // starts its forward.
  bool forward_prefetch = false;
  // Their parameters are left as they are: not sharded, not reduced.
  std::vector<std::shared_ptr<torch::nn::Module>> ignored_modules;
  // HYBRID_SHARD / _HYBRID_SHARD_ZERO2: the group of ranks (one per node)
  // holding the same shard; `group` is then the node's ranks.
  std::shared_ptr<ProcessGroup> replicate_group;
};

class FullyShardedDataParallel : public torch::nn::Module, public ModelWrapper {
 public:
  struct Unit;

  // Collective over `group` (nullptr: the default group). On error nothing
  // is sharded: the module keeps its parameters as they were.
  static absl::StatusOr<std::shared_ptr<FullyShardedDataParallel>> Create(
      std::shared_ptr<torch::nn::Module> module, FsdpOptions options = {},
      std::shared_ptr<ProcessGroup> group = nullptr);
  ~FullyShardedDataParallel() override;

  std::shared_ptr<torch::nn::Module> wrapped() const override {
    return module_;
  }

  // Before each forward: takes the optimizer's gradient (zeroed or not)
  // back into the shards and gathers the units that are not gathered by
  // UnitForward.
  absl::Status BeforeForward();

  // loss.backward(); every unit's gradients are averaged into its shard as
  // soon as they are complete, and the unit freed; then the parameters are
  // the shard views again, with their gradients. If backward fails, every
  // unit is freed and the gradients not yet reduced are dropped (also those
  // accumulated under no_sync): the next step starts from zero.
  absl::Status Backward(const torch::Tensor& loss);

  // torch's FSDP clip_grad_norm_: after Backward, scales the gradients the
  // optimizer sees (every unit's parameters' and the unsharded ones') so
  // that their total norm, over every rank's shards, is at most `max_norm`
  // (factor max_norm / (norm + 1e-6), at most 1, NaN when the norm is, as
  // torch::nn::utils::clip_grad_norm_ on one process); returns that norm
  // before clipping, the same on every rank. The parts of sharded gradients
  // are combined by an all-reduce (the sum of p-th powers; the maximum for
  // norm_type inf). Collective over the shard group.
  absl::StatusOr<double> ClipGradNorm(double max_norm, double norm_type = 2.0);

  // Frees every gathered unit and drops gathers prefetched for units no
  // forward reached: after a forward without backward (evaluation), or one
  // that threw (TrainStep calls it then), so that a change of the shards
  // before the next forward (an optimizer step) is what it computes with.
  absl::Status Reshard();

  // Gradients accumulate locally (unreduced) while a NoSync is alive; the
  // next Backward outside one reduces the sum.
  class NoSync {
   public:
    explicit NoSync(FullyShardedDataParallel* fsdp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    FullyShardedDataParallel* fsdp_;
  };
  NoSync no_sync() { return NoSync(this); }

  // ---- State dicts ----------------------------------------------------------

  // The full state dict (StateDictType.FULL_STATE_DICT): every parameter
  // gathered in its original shape and dtype, on the CPU, under the wrapped
  // module's names (a tied tensor under each of its names, as torch's
  // state_dict), then its buffers. rank0_only: only the job's rank 0 (rank
  // 0 of the group and, under HYBRID_*, of the replicate group) gets the
  // values; the other ranks, the other nodes' rank 0 too, an empty dict.
  // Collective.
  absl::StatusOr<torch::OrderedDict<std::string, torch::Tensor>> FullStateDict(
      bool rank0_only = false);
  // Loads one (rank0_only: only rank 0's dict is read, and broadcast). A
  // missing or unexpected key, or a shape that differs, is INVALID_ARGUMENT
  // on every rank, and nothing is loaded.
  absl::Status LoadFullStateDict(
      const torch::OrderedDict<std::string, torch::Tensor>& state,
      bool rank0_only = false);

  // Sharded checkpoint (StateDictType.SHARDED_STATE_DICT): each rank writes
  // its shards and the metadata to <dir>/shard_rank<R>.pt (plus the
  // unsharded parameters and buffers); a job of any size loads them back,
  // re-sharding. The format (fsdp_checkpoint_file.h; docs/architecture.md,
  // "Sharded checkpoints") is the one Python's distkit.fsdp writes and reads
  // (save_sharded_checkpoint / load_sharded_checkpoint), so a checkpoint
  // crosses languages. Collective (a barrier, so that all files exist after
  // it). Loading is all or nothing: a rank that cannot read or load its
  // part fails every rank, and every rank puts its shards, parameters and
  // buffers back as they were.
  absl::Status SaveShardedCheckpoint(const std::string& dir);
  absl::Status LoadShardedCheckpoint(const std::string& dir);

  // ---- Introspection --------------------------------------------------------

  int num_units() const { return static_cast<int>(units_.size()); }
  // Unit k's module path ("" for the root) and engine.
  const std::string& unit_name(int k) const;
  FlatShard& unit_shard(int k);
  // Unit k's parameters: the tensors the optimizer holds (FlatShard
  // parameter i is unit_params(k)[i]).
  const std::vector<torch::Tensor>& unit_params(int k) const;
  // Their full shapes.
  const std::vector<std::vector<int64_t>>& unit_param_shapes(int k) const;
  // Whether this is the job's rank 0 (under HYBRID_*: of both groups).
  bool job_rank0() const;
  // The group the units shard over (a node's ranks under HYBRID_*).
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  // Bytes the units hold now, and the most they held at once.
  size_t held_bytes() const;
  size_t peak_held_bytes() const { return peak_bytes_; }
  // Gradients backward wrote outside the engine's buffer and that were
  // copied into it, since Create. Zero for units whose forward runs through
  // UnitForward and for the root unit: their .grad is the engine's buffer
  // while backward runs (blocks gathered by BeforeForward alone are copied,
  // so that their full gradients are not all allocated at once).
  int64_t grad_copies() const { return grad_copies_; }
  void ResetPeakHeldBytes() { peak_bytes_ = held_bytes(); }
  // The engine's per-unit timeline since the last call, oldest first.
  struct TimelineEvent {
    int unit;
    FlatShard::Event::Kind kind;
    absl::Time at;
  };
  std::vector<TimelineEvent> TakeTimeline();

  // Used by UnitForward.
  torch::Tensor RunUnitForward(Unit* unit,
                               const std::function<torch::Tensor()>& forward);

 private:
  class GradReadyHook;
  FullyShardedDataParallel(std::shared_ptr<torch::nn::Module> module,
                           FsdpOptions options,
                           std::shared_ptr<ProcessGroup> group);
  absl::Status Build();
  absl::StatusOr<std::unique_ptr<Unit>> BuildUnit(
      const std::string& name, const torch::nn::Module* module,
      std::vector<std::pair<std::string, torch::Tensor>> params);

  // Parameters as full-shape views of the gathered buffer, or as the
  // 1-D pieces of the shard (with the shard's gradients, or none).
  absl::Status UseFullViews(Unit& unit);
  void UsePieceViews(Unit& unit, bool with_grads);
  absl::Status Gather(Unit& unit);  // unshard + full views
  void StartGather(Unit* unit);     // prefetch (nullptr: nothing)
  absl::Status FreeUnit(Unit& unit, bool with_grads);
  // Gathers started for units that were then not used (a forward that
  // threw after prefetching the next unit, a backward that did not reach
  // one): they hold the shards' values from their start.
  absl::Status DropUnusedGathers();

  absl::Status TakeBackGrads(Unit& unit);
  absl::Status PrepareBackward(const torch::Tensor& loss);
  void OnGradReady(Unit* unit, int index);
  void OnPreBackward(Unit* unit);
  absl::Status AttachFullGrads(Unit& unit);
  absl::Status FinishUnit(Unit& unit);
  absl::Status CompleteReduction();  // waits for reducing_, if any
  // +1: the unit after `unit` in the last forward; -1: the one before it in
  // this forward.
  Unit* NextInForward(const Unit* unit, int step) const;

  absl::Status BroadcastFromRank0(const torch::Tensor& t,
                                  const std::string& name);
  absl::Status RequireSharded(absl::string_view what) const;
  absl::Status CheckStateDict(
      const torch::OrderedDict<std::string, torch::Tensor>& state) const;
  // `valid` on every rank, or the first rank's problem: "rank R's <what>".
  absl::Status AgreeValid(absl::Status valid, bool rank0_only,
                          absl::string_view what);

  void RecordError(const absl::Status& status);
  absl::Status TakeError();
  void Account();

  std::shared_ptr<torch::nn::Module> module_;
  const FsdpOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::unique_ptr<Unit>> units_;
  // Parameters left as they are (ignored modules, frozen parameters).
  std::vector<std::pair<std::string, torch::Tensor>> unsharded_params_;
  // Buffers cast to options_.buffer_dtype: their own dtypes, by name.
  absl::flat_hash_map<std::string, torch::ScalarType> buffer_dtypes_;
  // Buffer `name`'s value for a state dict or checkpoint: on the CPU, in
  // its own dtype.
  torch::Tensor SavedBuffer(const std::string& name,
                            const torch::Tensor& value) const;
  bool absorbed_ = false;  // an enclosing FullyShard took the units
  // The order units ran through UnitForward in this / the last forward.
  std::vector<Unit*> forward_order_;
  std::vector<Unit*> last_forward_order_;
  bool first_iteration_ = true;
  bool in_iteration_ = false;
  // AccumulateGrad nodes hooked for this backward (kept alive meanwhile).
  std::vector<std::shared_ptr<torch::autograd::Node>> hooked_;
  size_t peak_bytes_ = 0;
  int64_t grad_copies_ = 0;
  Unit* reducing_ = nullptr;  // the unit whose reduction is in flight
  // Who Backward's thread issues as (cc/group/issuer.h): the hooks that
  // gather and reduce units during backward run on the device's thread for
  // CUDA tensors and issue as it, one sequence with the caller's.
  uint32_t backward_issuer_ = 0;
  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

// Runs `forward` as `module`'s forward. When `module` is a unit of a
// FullyShardedDataParallel, its parameters are gathered first (and freed
// after, under FULL_SHARD), and gathered again before its backward;
// otherwise this is just forward(). Errors are thrown as c10::Error, as
// LibTorch's own forward errors are.
torch::Tensor UnitForward(const torch::nn::Module& module,
                          const std::function<torch::Tensor()>& forward);

// FSDP2's fully_shard: call it on each block, then on the root. A block's
// call makes it a unit at once; the root's call makes the rest of the
// parameters the root unit, adopts the blocks' units, and returns the
// object that drives training (BeforeForward / Backward). Options apply to
// the units each call creates. Like FSDP2's state, which lives with its
// module, what FullyShard makes stays alive (also when the returned pointer
// is dropped) until an enclosing FullyShard or Create adopts it, or the
// process ends.
absl::StatusOr<std::shared_ptr<FullyShardedDataParallel>> FullyShard(
    std::shared_ptr<torch::nn::Module> module, FsdpOptions options = {},
    std::shared_ptr<ProcessGroup> group = nullptr);

}  // namespace distkit

#endif  // DISTKIT_CC_TORCH_FULLY_SHARDED_DATA_PARALLEL_H_
