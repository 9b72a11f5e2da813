// GradReducer: data-parallel gradient averaging on flat buffers, independent
// of any framework (LibTorch's DDP, the Python wrapper and the ABI's
// dk_reducer_* for Rust and Go trainers all drive this class).
//
// Each iteration:
//   1. PrepareForBackward(unused)   (optional; implicit on the first MarkReady)
//   2. MarkReady(i, grad) as backward produces parameter i's gradient. The
//      gradient is copied into its bucket; when a bucket is complete (and all
//      buckets before it are launched) its all_reduce starts asynchronously,
//      so communication overlaps the rest of backward.
//   3. Finalize(): waits for every bucket, averages, and writes each gradient
//      back where MarkReady found it.
//
// Buckets: parameters in reverse registration order, by dtype, closed at
// `first_bucket_cap_mb` (the first) and `bucket_cap_mb` (the rest); after the
// first iteration they are rebuilt in the order gradients actually became
// ready (rank 0's order, broadcast, so every rank agrees), as torch's
// Reducer does. The averaged values equal torch DDP's: each bucket is divided
// by the world size, then summed across ranks (or, with a compression hook,
// cast to float16/bfloat16, divided, summed and cast back).
//
// Devices: the parameters live on one device (any: cpu, cuda:<k>); the
// buckets live on the group's comm device, and gradients are copied in and
// out with device copies (mmengine's casting rule: CUDA gradients reach a
// Gloo group through host buckets; with NCCL the buckets are device memory).
// On a device comm device the mean is the backend's (ncclAvg) or a division
// there, never a host loop over device memory.

#ifndef DISTKIT_CC_PARALLEL_GRAD_REDUCER_H_
#define DISTKIT_CC_PARALLEL_GRAD_REDUCER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cc/core/copy_stream.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/process_group.h"
#include "cc/parallel/bucket_assignment.h"

namespace distkit {

enum class CommHook {
  kNone = 0,          // average in the gradient's dtype
  kFp16Compress = 1,  // torch's fp16_compress_hook
  kBf16Compress = 2,  // torch's bf16_compress_hook
};

class GradReducer {
 public:
  struct Options {
    double bucket_cap_mb = 25;
    double first_bucket_cap_mb = 1;
    // Parameters that get no gradient in an iteration are allowed (the
    // framework names them in PrepareForBackward); without it they are an
    // error naming them.
    bool find_unused_parameters = false;
    // Gradients live in the buckets (GradView): no copy in or out.
    bool gradient_as_bucket_view = false;
    // Broadcast rank 0's buffers before every forward (BroadcastBuffers).
    bool broadcast_buffers = true;
    CommHook comm_hook = CommHook::kNone;
  };

  struct Parameter {
    TensorRef data;    // the values: broadcast from rank 0 at construction
    std::string name;  // for error messages
  };

  // Collective over `group`: broadcasts rank 0's parameters and buffers so
  // every replica starts equal, then assigns buckets.
  //
  // Before the broadcast, every rank's registration is compared with rank
  // 0's (torch's DDP checks the parameters at construction too): the number
  // of parameters and buffers, each one's dtype and element count, and the
  // options that decide the buckets and collectives (bucket caps,
  // find_unused_parameters, comm_hook, broadcast_buffers). Shapes and devices
  // may differ: buckets hold elements, and Rust's and Go's reducers register
  // flat arrays beside Python's shaped tensors in a mixed-language job. A
  // model built differently on one rank would otherwise pair
  // mismatched memory in the broadcast and the bucket all_reduces. When they
  // agree this is one all_reduce of three integers (a hash of it all). When
  // they do not, every rank returns the same INVALID_ARGUMENT naming the
  // first difference from rank 0 ("rank 1's parameter 3 (fc.weight) is
  // float32 x144, while rank 0's is float32 x128"). A problem of one
  // rank's own (parameters on several devices, say) fails every rank too:
  // that rank with its problem, the others with the lowest such rank's. No
  // rank is left in a collective: the group stays usable.
  static absl::StatusOr<std::unique_ptr<GradReducer>> Create(
      std::shared_ptr<ProcessGroup> group, std::vector<Parameter> params,
      std::vector<TensorRef> buffers, Options options);
  ~GradReducer();

  // Starts an iteration. `unused`: parameters this rank's forward did not
  // use (find_unused_parameters only): they count as ready with a zero
  // gradient. Idempotent until the first MarkReady. One that holds a gradient
  // accumulated under no_sync is not unused: the framework marks it ready
  // with that gradient (DistributedDataParallel does).
  absl::Status PrepareForBackward(absl::Span<const int> unused = {});

  // Parameter `index`'s gradient is final for this iteration. `grad` must stay
  // valid until Finalize() returns (it is written there). Any thread.
  absl::Status MarkReady(int index, TensorRef grad);
  // find_unused_parameters: parameter `index` was not used by this rank's
  // forward but holds a gradient (an earlier backward's, not zeroed): it
  // contributes that gradient, as torch's DDP does, without counting as
  // used here. Unused everywhere, `grad` keeps its value (also where it is
  // the bucket view).
  absl::Status MarkUnusedReady(int index, TensorRef grad);

  // Waits for every bucket, averages, writes back. A parameter that got no
  // gradient without find_unused_parameters is FAILED_PRECONDITION naming it
  // (on every rank, with no collective left half-done).
  absl::Status Finalize();

  // Ends an iteration that will not be finalized (its backward raised, on
  // every rank alike: a rank that fails alone leaves its peers waiting in
  // Finalize for buckets it will not launch, as in torch's DDP): waits for
  // the buckets already launched and forgets the gradients marked ready,
  // so that the next iteration starts afresh instead of finding them
  // "marked ready twice" and writing back into gradients the caller may
  // have freed. No-op outside an iteration.
  void AbandonIteration();

  // no_sync: while false, MarkReady and Finalize do nothing (gradients
  // accumulate locally and are reduced at the next synchronized iteration).
  void set_require_sync(bool require_sync);
  bool require_sync() const;

  // Broadcasts rank 0's buffers (collective).
  absl::Status BroadcastBuffers();

  // gradient_as_bucket_view: where parameter `index`'s gradient must live
  // (numel elements of its dtype), valid for the reducer's lifetime, also
  // across bucket rebuilds (the framework re-asks after the first iteration).
  absl::StatusOr<TensorRef> GradView(int index);
  // Bumped whenever views move (the rebuild after the first iteration).
  int64_t view_generation() const;

  // After Finalize: parameter `index`'s averaged gradient, in the reducer's
  // memory (valid until the next iteration starts). For a parameter this
  // rank did not use but others did (find_unused_parameters), this is the
  // only place its gradient is written.
  absl::StatusOr<TensorRef> ReducedGrad(int index);

  // find_unused_parameters: whether any rank used parameter `index` in the
  // last finalized iteration (a gradient unused everywhere is not written).
  bool globally_used(int index) const;

  const std::vector<std::vector<int>>& buckets() const { return buckets_; }
  const Options& options() const { return options_; }
  int64_t iteration() const;
  // Whether the current iteration has started (a gradient was marked ready
  // or PrepareForBackward was called) and awaits Finalize.
  bool iteration_started() const;

  // The last iteration's timeline, to show communication overlapping
  // backward: when each bucket's all_reduce was launched and whether it had
  // already finished when Finalize started.
  struct BucketTrace {
    int bucket = 0;
    size_t bytes = 0;
    absl::Duration launched_after_prepare;
    bool done_before_finalize = false;
  };
  struct IterationTrace {
    absl::Duration finalize_started_after_prepare;
    absl::Duration finalize_wait;  // time Finalize spent waiting for buckets
    std::vector<BucketTrace> buckets;
  };
  IterationTrace last_trace() const;

 private:
  // Copies on the group's caller stream for a call (copy_stream.h): ordered
  // with the caller's work and the group's collectives, not the legacy
  // stream's.
  CopyStreamScope OnCallerStream() const {
    return CopyStreamScope(group_->comm_device(), group_->cuda_stream());
  }
  struct Bucket;
  GradReducer(std::shared_ptr<ProcessGroup> group,
              std::vector<Parameter> params, std::vector<TensorRef> buffers,
              Options options);

  absl::Status Broadcast(absl::Span<const TensorRef> tensors);
  absl::Status BuildBuckets(absl::Span<const int> order)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PrepareLocked(absl::Span<const int> unused)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkReadyLocked(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MarkReadyImpl(int index, TensorRef grad, bool used);
  void LaunchReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Launch(Bucket& bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The compression hooks' fp16 / bf16 copy to and from a device bucket.
  absl::Status StageCompressed(Bucket& bucket)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Decompress(Bucket& bucket) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a bucket that could not be launched, for Finalize to report.
  void Fail(Bucket& bucket, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResetIteration() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RebuildBuckets() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<ProcessGroup> group_;
  const std::vector<Parameter> params_;
  const std::vector<TensorRef> buffers_;
  const Options options_;

  mutable absl::Mutex mu_;
  std::vector<std::vector<int>> buckets_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Bucket>> bucket_state_ ABSL_GUARDED_BY(mu_);
  // Buckets replaced by the rebuild: kept, because with
  // gradient_as_bucket_view a framework's gradients point into them until it
  // re-fetches its views.
  std::vector<std::unique_ptr<Bucket>> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<int> bucket_of_ ABSL_GUARDED_BY(mu_);     // param -> bucket
  std::vector<size_t> offset_of_ ABSL_GUARDED_BY(mu_);  // byte offset in it
  std::vector<bool> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> locally_used_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> globally_used_ ABSL_GUARDED_BY(mu_);
  std::vector<TensorRef> grads_ ABSL_GUARDED_BY(mu_);  // where to write back
  // MarkUnusedReady's gradients that are their bucket slot: their values,
  // put back if no rank used them (the reduction runs in the slot).
  std::vector<std::pair<int, std::vector<char>>> kept_ ABSL_GUARDED_BY(mu_);
  std::vector<int> ready_order_ ABSL_GUARDED_BY(mu_);  // first iteration
  size_t next_launch_ ABSL_GUARDED_BY(mu_) = 0;
  bool in_iteration_ ABSL_GUARDED_BY(mu_) = false;
  bool require_sync_ ABSL_GUARDED_BY(mu_) = true;
  bool rebuilt_ ABSL_GUARDED_BY(mu_) = false;
  int64_t iteration_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t view_generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time prepared_at_ ABSL_GUARDED_BY(mu_);
  // Who the iteration's all_reduces are issued as (cc/group/issuer.h): the
  // issuer of the thread that began it. Autograd runs the hooks that launch
  // buckets of CUDA gradients on the device's thread, while backward was
  // called (and leftovers are launched) on the caller's; they are one
  // sequence, not two threads' collectives in flight.
  uint32_t issuer_ ABSL_GUARDED_BY(mu_) = 0;
  IterationTrace trace_ ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_PARALLEL_GRAD_REDUCER_H_
