#include "cc/parallel/flat_shard.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/core/device_staging.h"
#include "cc/core/enum_names.h"
#include "cc/core/host_staging.h"
#include "cc/core/status.h"
#include "cc/group/agreement.h"
#include "cc/parallel/flat_shard_flat.h"

namespace distkit {

using flat_shard_internal::Allocate;
using flat_shard_internal::Owned;

namespace {

// FailAllocationForTesting's countdown: the allocation that takes it to 0
// fails.
std::atomic<int> fail_allocation_in{0};

// Whether host memory `t` is all zero bits (a device buffer: false).
bool AllZero(TensorRef t) {
  if (!t.device().is_cpu()) return false;
  // Runs once per unit per step over the shard gradient: OR a block at a
  // time (a loop the compiler vectorizes), and stop at the first nonzero.
  const auto* bytes = static_cast<const unsigned char*>(t.data());
  const size_t n = t.nbytes();
  constexpr size_t kBlock = 4096;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    unsigned char any = 0;
    for (size_t i = begin; i < end; ++i) any |= bytes[i];
    if (any != 0) return false;
  }
  return true;
}

absl::Status Divide(TensorRef t, int divisor) {
  if (divisor == 1) return absl::OkStatus();
  DK_ASSIGN_OR_RETURN(HostCopy h, HostCopy::Of(t, /*read=*/true));
  DivideBySize(h.host().data(), t.dtype(), t.numel(), divisor);
  return h.WriteBack();
}

absl::Status Wait(std::shared_ptr<Work>& work) {
  if (work == nullptr) return absl::OkStatus();
  absl::Status s = work->Wait();
  work.reset();
  return s;
}

std::string Describe(int64_t dtype, int64_t numel, int64_t frozen) {
  return absl::StrCat(DataTypeName(static_cast<DataType>(dtype)), " x ", numel,
                      frozen != 0 ? " (frozen)" : "");
}

// Local problems are agreed on first, so no rank enters a collective the
// others skip. A rank with a problem of its own says what it is; the others
// name the first rank that has one, and why.
absl::Status AgreeOnProblems(ProcessGroup& group,
                             const std::string& local_problem) {
  const bool own = !local_problem.empty();
  const absl::Status mine =
      own ? absl::InvalidArgumentError(local_problem) : absl::OkStatus();
  DK_ASSIGN_OR_RETURN(Verdict verdict,
                      AgreeOnVerdict(group, Verdict::Mine(group, mine)));
  if (verdict.ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("FlatShard on group '", group.name(), "': rank ",
                   own ? group.rank() : verdict.RankIn(group),
                   " cannot shard its parameters (",
                   own ? local_problem : verdict.status.message(), ")"));
}

// Every rank of `group` registers the same parameters: per parameter
// (dtype, numel), compared with rank 0's.
absl::Status AgreeOnParameters(ProcessGroup& group,
                               const std::vector<int64_t>& signature,
                               const std::vector<std::string>& names) {
  DK_ASSIGN_OR_RETURN(std::optional<ValueMismatch> mismatch,
                      FindValueMismatch(group, signature, /*record_size=*/3));
  if (!mismatch.has_value()) return absl::OkStatus();
  const ValueMismatch& m = *mismatch;
  if (m.record < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FlatShard on group '", group.name(),
        "': ranks register different parameters: rank 0 has ",
        m.rank0_values[0], ", rank ", m.rank, " has ", m.rank_values[0]));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "FlatShard on group '", group.name(), "': parameter ", m.record, " ('",
      names[m.record], "' on rank ", group.rank(),
      ") differs across ranks: rank 0 has ",
      Describe(m.rank0_values[0], m.rank0_values[1], m.rank0_values[2]),
      ", rank ", m.rank, " has ",
      Describe(m.rank_values[0], m.rank_values[1], m.rank_values[2])));
}

}  // namespace

namespace flat_shard_internal {

absl::StatusOr<Owned> Allocate(Device device, DataType dtype, int64_t numel) {
  if (fail_allocation_in.load() > 0 && --fail_allocation_in == 0) {
    return absl::ResourceExhaustedError(
        "FlatShard: allocation failed (injected for a test)");
  }
  Owned o;
  DK_ASSIGN_OR_RETURN(
      o.buffer, DeviceBuffer::Allocate(device, numel * ElementSize(dtype)));
  o.view = TensorRef(o.buffer.data(), numel, dtype, device);
  return o;
}

}  // namespace flat_shard_internal

// ---- Strategies -------------------------------------------------------------

namespace {

constexpr EnumName<ShardingStrategy> kShardingStrategyNames[] = {
    {ShardingStrategy::kFullShard, "FULL_SHARD"},
    {ShardingStrategy::kShardGradOp, "SHARD_GRAD_OP"},
    {ShardingStrategy::kNoShard, "NO_SHARD"},
    {ShardingStrategy::kHybridShard, "HYBRID_SHARD"},
    {ShardingStrategy::kHybridShardZero2, "_HYBRID_SHARD_ZERO2"}};

}  // namespace

absl::string_view ShardingStrategyName(ShardingStrategy strategy) {
  return NameIn(kShardingStrategyNames, strategy, "?");
}

absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name) {
  if (std::optional<ShardingStrategy> strategy =
          ValueIn(kShardingStrategyNames, name)) {
    return *strategy;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown sharding strategy '", name,
                   "' (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, "
                   "_HYBRID_SHARD_ZERO2)"));
}

bool ReshardsAfterForward(ShardingStrategy strategy) {
  return strategy == ShardingStrategy::kFullShard ||
         strategy == ShardingStrategy::kHybridShard;
}

// ---- Construction -----------------------------------------------------------

FlatShard::FlatShard(std::shared_ptr<ProcessGroup> group, Options options)
    : group_(std::move(group)),
      options_(std::move(options)),
      created_at_(absl::Now()) {}

FlatShard::~FlatShard() {
  // Collectives in flight use buffers freed below: wait for them first.
  for (auto& f : flats_) {
    Wait(f->gather).IgnoreError();
    Wait(f->reduce).IgnoreError();
  }
  // So do copies queued on the caller's stream.
  const CopyStreamScope on_stream = OnCallerStream();
  SynchronizeCopyStream().IgnoreError();
}

absl::StatusOr<std::unique_ptr<FlatShard>> FlatShard::Create(
    std::shared_ptr<ProcessGroup> group, std::vector<Parameter> params,
    Options options) {
  if (group == nullptr)
    return absl::InvalidArgumentError("FlatShard: no group");
  const bool hybrid = options.strategy == ShardingStrategy::kHybridShard ||
                      options.strategy == ShardingStrategy::kHybridShardZero2;
  if (hybrid != (options.replicate_group != nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FlatShard: ", ShardingStrategyName(options.strategy),
                     hybrid ? " needs a replicate group (one rank per node)"
                            : " takes no replicate group"));
  }
  std::unique_ptr<FlatShard> unit(new FlatShard(group, std::move(options)));
  const CopyStreamScope on_stream = unit->OnCallerStream();
  const Options& o = unit->options_;
  std::string problem;
  std::vector<int64_t> signature;
  std::vector<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = params[i];
    names.push_back(p.name.empty() ? absl::StrCat("params[", i, "]") : p.name);
    signature.push_back(static_cast<int64_t>(p.data.dtype()));
    signature.push_back(p.data.numel());
    signature.push_back(p.frozen ? 1 : 0);
    if (problem.empty() && !IsFloatingPoint(p.data.dtype())) {
      problem = absl::StrCat(names.back(), " is ", DataTypeName(p.data.dtype()),
                             "; only floating-point parameters are sharded");
    }
    if (problem.empty() && p.data.numel() > 0 && p.data.data() == nullptr) {
      problem = absl::StrCat(names.back(), " has no data");
    }
    if (problem.empty() && !(p.data.device() == params[0].data.device())) {
      problem = absl::StrCat(names.back(), " is on ",
                             p.data.device().ToString(), ", ", names[0], " on ",
                             params[0].data.device().ToString());
    }
  }
  // The unit's collectives run on the parameters' device: it must be the
  // group's (CUDA parameters shard over nccl, host ones over gloo / mpi).
  if (problem.empty() && !params.empty() &&
      !(params[0].data.device() == group->comm_device())) {
    problem = absl::StrCat(
        "the parameters are on ", params[0].data.device().ToString(),
        " but group '", group->name(), "' (", group->backend_name(),
        ") communicates on ", group->comm_device().ToString(),
        "; shard them over a backend that works on their device");
  }
  for (std::optional<DataType> d : {o.param_dtype, o.reduce_dtype}) {
    if (problem.empty() && d.has_value() && !IsFloatingPoint(*d)) {
      problem = absl::StrCat("mixed precision dtype ", DataTypeName(*d),
                             " is not floating point");
    }
  }
  if (problem.empty() && params.empty()) problem = "a unit needs parameters";
  // Every rank takes the same collectives whatever it finds: a check that
  // fails on some ranks only is carried to the others before anyone returns
  // (in a hybrid unit, across the replicate group and back, since each
  // replicate group spans every node).
  absl::Status agreed = AgreeOnProblems(*group, problem);
  if (agreed.ok()) agreed = AgreeOnParameters(*group, signature, names);
  if (hybrid) {
    ProcessGroup& replicate = *o.replicate_group;
    DK_ASSIGN_OR_RETURN(
        Verdict across,
        AgreeOnVerdict(replicate, Verdict::Mine(replicate, agreed)));
    if (agreed.ok() && !across.ok()) agreed = across.status;
    if (agreed.ok()) agreed = AgreeOnParameters(replicate, signature, names);
    DK_ASSIGN_OR_RETURN(Verdict back,
                        AgreeOnVerdict(*group, Verdict::Mine(*group, agreed)));
    if (agreed.ok() && !back.ok()) agreed = back.status;
    unit->replicas_ = replicate.size();
  }
  DK_RETURN_IF_ERROR(agreed);
  if (o.strategy == ShardingStrategy::kNoShard) {
    unit->shard_count_ = 1;
    unit->shard_rank_ = 0;
  } else {
    unit->shard_count_ = group->size();
    unit->shard_rank_ = group->rank();
  }
  unit->param_device_ = params[0].data.device();
  unit->shard_device_ = o.offload_params ? Device::Cpu() : unit->param_device_;
  DK_RETURN_IF_ERROR(unit->Place(params));
  DK_RETURN_IF_ERROR(unit->AllocateShards());
  std::vector<TensorRef> values;
  for (const Parameter& p : params) values.push_back(p.data);
  DK_RETURN_IF_ERROR(unit->FillShards(values, o.sync_module_states));
  return unit;
}

absl::Status FlatShard::Place(const std::vector<Parameter>& params) {
  for (const Parameter& p : params) {
    int flat = -1;
    for (size_t k = 0; k < flats_.size(); ++k) {
      if (flats_[k]->dtype == p.data.dtype() && flats_[k]->frozen == p.frozen) {
        flat = static_cast<int>(k);
      }
    }
    if (flat < 0) {
      flats_.push_back(std::make_unique<Flat>());
      flats_.back()->dtype = p.data.dtype();
      flats_.back()->frozen = p.frozen;
      flat = static_cast<int>(flats_.size()) - 1;
    }
    Flat& f = *flats_[flat];
    placements_.push_back({flat, f.numel, p.data.numel()});
    names_.push_back(p.name);
    f.numel += p.data.numel();
  }
  for (auto& f : flats_) {
    const int64_t n = shard_count_;
    f->padded = std::max<int64_t>(n, (f->numel + n - 1) / n * n);
    f->shard_numel = f->padded / n;
  }
  return absl::OkStatus();
}

absl::Status FlatShard::AllocateShards() {
  absl::MutexLock lock(&mu_);
  for (auto& f : flats_) {
    DK_ASSIGN_OR_RETURN(f->shard,
                        Allocate(shard_device_, f->dtype, f->shard_numel));
    if (!f->frozen) {
      DK_ASSIGN_OR_RETURN(f->shard_grad,
                          Allocate(shard_device_, f->dtype, f->shard_numel));
      DK_RETURN_IF_ERROR(ZeroFill(f->shard_grad.view));
    }
    f->full_is_shard = options_.strategy == ShardingStrategy::kNoShard &&
                       ComputeDtype(*f) == f->dtype &&
                       shard_device_ == param_device_;
  }
  Account();
  return absl::OkStatus();
}

bool FlatShard::JobRank0() const {
  return group_->rank() == 0 && (options_.replicate_group == nullptr ||
                                 options_.replicate_group->rank() == 0);
}

// Builds each flat buffer from the full values (only rank 0's when
// `from_rank0`: then broadcast over the replicate group and the group) and
// keeps this rank's slice. `values_error` (the caller could not read its
// values) counts only where the values are used.
absl::Status FlatShard::FillShards(const std::vector<TensorRef>& values,
                                   bool from_rank0,
                                   const absl::Status& values_error) {
  const bool have_values = !from_rank0 || JobRank0();
  // Check the values first; with from_rank0, rank 0 tells everyone, so no
  // rank waits in a broadcast that will not come.
  absl::Status valid;
  if (have_values && !values_error.ok()) {
    valid = values_error;
  } else if (have_values && values.size() != placements_.size()) {
    valid = absl::InvalidArgumentError(
        absl::StrCat("FlatShard: ", values.size(), " values for ",
                     placements_.size(), " parameters"));
  }
  for (size_t i = 0; valid.ok() && have_values && i < placements_.size(); ++i) {
    const TensorRef v = values[i];
    const Flat& f = *flats_[placements_[i].flat];
    if (v.dtype() != f.dtype || v.numel() != placements_[i].numel ||
        (v.numel() > 0 && v.data() == nullptr)) {
      valid = absl::InvalidArgumentError(
          absl::StrCat("FlatShard: the value for ", names_[i], " is ",
                       DataTypeName(v.dtype()), " x ", v.numel(), ", expected ",
                       DataTypeName(f.dtype), " x ", placements_[i].numel));
    }
  }
  if (from_rank0) {
    // Over the replicate group first: the job's rank 0 is rank 0 of both.
    Verdict verdict = Verdict::Mine(*group_, valid);
    for (ProcessGroup* g : {options_.replicate_group.get(), group_.get()}) {
      if (g == nullptr) continue;
      DK_ASSIGN_OR_RETURN(verdict, AgreeOnRootVerdict(*g, verdict));
    }
    if (!verdict.ok() && valid.ok()) {
      valid = absl::InvalidArgumentError(absl::StrCat(
          "FlatShard: rank 0's values do not match the unit's parameters (",
          absl::StripPrefix(verdict.status.message(), "FlatShard: "), ")"));
    }
  }
  DK_RETURN_IF_ERROR(valid);
  for (size_t k = 0; k < flats_.size(); ++k) {
    Flat& f = *flats_[k];
    DK_ASSIGN_OR_RETURN(Owned full, Allocate(param_device_, f.dtype, f.padded));
    DK_RETURN_IF_ERROR(ZeroFill(full.view));
    for (size_t i = 0; have_values && i < placements_.size(); ++i) {
      const Placement& p = placements_[i];
      if (p.flat != static_cast<int>(k)) continue;
      DK_RETURN_IF_ERROR(CopyBytes(full.view.Slice(p.offset, p.numel).data(),
                                   param_device_, values[i].data(),
                                   values[i].device(), values[i].nbytes()));
    }
    if (from_rank0) {
      if (options_.replicate_group != nullptr) {
        DK_RETURN_IF_ERROR(options_.replicate_group->Broadcast(full.view, 0));
      }
      DK_RETURN_IF_ERROR(group_->Broadcast(full.view, 0));
    }
    DK_RETURN_IF_ERROR(CopyBytes(
        f.shard.view.data(), shard_device_,
        full.view.Slice(shard_rank_ * f.shard_numel, f.shard_numel).data(),
        param_device_, f.shard.view.nbytes()));
  }
  return absl::OkStatus();
}

// ---- Parameters -------------------------------------------------------------

DataType FlatShard::ComputeDtype(const Flat& f) const {
  return options_.param_dtype.value_or(f.dtype);
}

DataType FlatShard::ReduceDtype(const Flat& f) const {
  return options_.reduce_dtype.value_or(ComputeDtype(f));
}

absl::Status FlatShard::StartUnshard() {
  const CopyStreamScope on_stream = OnCallerStream();
  absl::MutexLock lock(&mu_);
  if (unsharded_ || gathering_) return absl::OkStatus();
  absl::Status started = StartUnshardLocked();
  if (!started.ok()) {
    // The gathers launched before the failure write into their buffers:
    // wait for them before freeing anything (a retry starts afresh).
    for (auto& f : flats_) {
      Wait(f->gather).IgnoreError();
      f->gather_in.Free();
      if (f->full_is_shard) {
        f->full.view = TensorRef();
      } else {
        f->full.Free();
      }
    }
    Account();
    return started;
  }
  gathering_ = true;
  Account();
  return absl::OkStatus();
}

absl::Status FlatShard::StartUnshardLocked() {
  Record(Event::kUnshardStart);
  for (auto& fp : flats_) {
    Flat& f = *fp;
    const DataType c = ComputeDtype(f);
    if (f.full_is_shard) {
      f.full.view = f.shard.view;  // a view; nothing is owned
      continue;
    }
    // The shard in compute dtype, on the parameters' device.
    TensorRef input = f.shard.view;
    if (c != f.dtype || !(shard_device_ == param_device_)) {
      if (!f.gather_in.live()) {
        DK_ASSIGN_OR_RETURN(f.gather_in,
                            Allocate(param_device_, c, f.shard_numel));
      }
      DK_RETURN_IF_ERROR(CastInto(f.gather_in.view, f.shard.view));
      input = f.gather_in.view;
    }
    if (shard_count_ == 1) {
      if (input.data() == f.shard.view.data()) {
        f.full.view = f.shard.view;
      } else {
        f.full = std::move(f.gather_in);
        f.gather_in = Owned();
      }
      continue;
    }
    DK_ASSIGN_OR_RETURN(f.full, Allocate(param_device_, c, f.padded));
    f.gather = group_->AllGatherAsync(input, f.full.view);
  }
  return absl::OkStatus();
}

absl::Status FlatShard::WaitUnshard() {
  const CopyStreamScope on_stream = OnCallerStream();
  absl::MutexLock lock(&mu_);
  if (!gathering_) {
    return unsharded_ ? absl::OkStatus()
                      : absl::FailedPreconditionError(
                            "FlatShard: WaitUnshard without StartUnshard");
  }
  absl::Status status;
  for (auto& f : flats_) {
    absl::Status s = Wait(f->gather);
    if (status.ok()) status = s;
  }
  gathering_ = false;
  // The staging copy is only needed while the gather reads it.
  for (auto& f : flats_) f->gather_in.Free();
  if (!status.ok()) {
    for (auto& f : flats_) {
      if (!f->full_is_shard) f->full.Free();
    }
    Account();
    return status;
  }
  unsharded_ = true;
  Record(Event::kUnshardDone);
  Account();
  return absl::OkStatus();
}

absl::Status FlatShard::Unshard() {
  DK_RETURN_IF_ERROR(StartUnshard());
  return WaitUnshard();
}

absl::Status FlatShard::Reshard() {
  const CopyStreamScope on_stream = OnCallerStream();
  bool in_flight = false;
  {
    absl::MutexLock lock(&mu_);
    in_flight = gathering_;
  }
  if (in_flight) DK_RETURN_IF_ERROR(WaitUnshard());
  absl::MutexLock lock(&mu_);
  for (auto& f : flats_) {
    if (f->full_is_shard) {
      f->full.view = TensorRef();
    } else {
      f->full.Free();
    }
  }
  if (unsharded_) Record(Event::kReshard);
  unsharded_ = false;
  Account();
  return absl::OkStatus();
}

bool FlatShard::is_unsharded() const {
  absl::MutexLock lock(&mu_);
  return unsharded_;
}

absl::StatusOr<TensorRef> FlatShard::FullParam(int index) const {
  if (index < 0 || index >= num_params()) {
    return absl::OutOfRangeError(
        absl::StrCat("FlatShard: no parameter ", index));
  }
  absl::MutexLock lock(&mu_);
  if (!unsharded_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FlatShard: ", names_[index], " is sharded; call Unshard first"));
  }
  const Placement& p = placements_[index];
  return flats_[p.flat]->full.view.Slice(p.offset, p.numel);
}

absl::StatusOr<TensorRef> FlatShard::FullFlat(int flat) const {
  if (flat < 0 || flat >= num_flat()) {
    return absl::OutOfRangeError(
        absl::StrCat("FlatShard: no flat buffer ", flat));
  }
  absl::MutexLock lock(&mu_);
  if (!unsharded_) {
    return absl::FailedPreconditionError(
        "FlatShard: the unit is sharded; call Unshard first");
  }
  return flats_[flat]->full.view;
}

// ---- Gradients --------------------------------------------------------------

absl::Status FlatShard::EnsureFullGrads() {
  if (grads_live_) return absl::OkStatus();
  for (auto& f : flats_) {
    if (f->frozen) continue;
    DK_ASSIGN_OR_RETURN(f->full_grad,
                        Allocate(param_device_, ComputeDtype(*f), f->padded));
    DK_RETURN_IF_ERROR(ZeroFill(f->full_grad.view));
  }
  grads_live_ = true;
  Account();
  return absl::OkStatus();
}

absl::StatusOr<TensorRef> FlatShard::FullGrad(int index) {
  const CopyStreamScope on_stream = OnCallerStream();
  if (index < 0 || index >= num_params()) {
    return absl::OutOfRangeError(
        absl::StrCat("FlatShard: no parameter ", index));
  }
  const Placement& p = placements_[index];
  if (flats_[p.flat]->frozen) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FlatShard: ", names_[index], " is frozen: it takes no gradient"));
  }
  absl::MutexLock lock(&mu_);
  DK_RETURN_IF_ERROR(EnsureFullGrads());
  return flats_[p.flat]->full_grad.view.Slice(p.offset, p.numel);
}

absl::Status FlatShard::AccumulateGrad(int index, TensorRef grad) {
  const CopyStreamScope on_stream = OnCallerStream();
  DK_ASSIGN_OR_RETURN(TensorRef dst, FullGrad(index));
  if (grad.numel() != dst.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FlatShard: the gradient of ", names_[index], " has ",
                     grad.numel(), " elements, the parameter ", dst.numel()));
  }
  return AddInto(dst, grad);
}

void FlatShard::set_require_sync(bool require_sync) {
  absl::MutexLock lock(&mu_);
  require_sync_ = require_sync;
}

bool FlatShard::require_sync() const {
  absl::MutexLock lock(&mu_);
  return require_sync_;
}

absl::Status FlatShard::StartReduceScatterGrads() {
  const CopyStreamScope on_stream = OnCallerStream();
  absl::MutexLock lock(&mu_);
  if (!require_sync_) return absl::OkStatus();  // no_sync: keep accumulating
  if (reducing_) {
    return absl::FailedPreconditionError(
        "FlatShard: a gradient reduction is already in flight");
  }
  // Every rank reduces, also one whose backward gave this unit nothing.
  DK_RETURN_IF_ERROR(EnsureFullGrads());
  absl::Status started = StartReduceLocked();
  if (!started.ok()) {
    // The reductions launched before the failure read and write their
    // buffers: wait for them before freeing anything. This step's
    // gradients are dropped (the error says so to the caller).
    for (auto& f : flats_) {
      Wait(f->reduce).IgnoreError();
      f->reduce_in.Free();
      f->reduce_out.Free();
      f->full_grad.Free();
    }
    grads_live_ = false;
    Account();
    return started;
  }
  grads_live_ = false;
  reducing_ = true;
  Account();
  return absl::OkStatus();
}

absl::Status FlatShard::StartReduceLocked() {
  Record(Event::kReduceStart);
  const int replicas_total = group_->size() * replicas_;
  for (auto& fp : flats_) {
    Flat& f = *fp;
    if (f.frozen) continue;
    const DataType r = ReduceDtype(f);
    if (r != f.full_grad.view.dtype()) {
      DK_ASSIGN_OR_RETURN(f.reduce_in, Allocate(param_device_, r, f.padded));
      DK_RETURN_IF_ERROR(CastInto(f.reduce_in.view, f.full_grad.view));
      f.full_grad.Free();
    } else {
      f.reduce_in = std::move(f.full_grad);  // lent to the collective
      f.full_grad = Owned();
    }
    // Pre-divide, then sum: the average without overflowing half types.
    DK_RETURN_IF_ERROR(Divide(f.reduce_in.view, replicas_total));
    f.reduce_direct = shard_count_ > 1 && r == f.dtype &&
                      shard_device_ == param_device_ &&
                      AllZero(f.shard_grad.view);
    if (f.reduce_direct) {
      // Nothing to add to (the gradients were zeroed): the reduce-scatter
      // writes this rank's part straight into the shard gradient, with no
      // output buffer and no add.
      f.reduce = group_->ReduceScatterAsync(f.reduce_in.view, f.shard_grad.view,
                                            ReduceOp::kSum);
    } else if (shard_count_ > 1) {
      DK_ASSIGN_OR_RETURN(f.reduce_out,
                          Allocate(param_device_, r, f.shard_numel));
      f.reduce = group_->ReduceScatterAsync(f.reduce_in.view, f.reduce_out.view,
                                            ReduceOp::kSum);
    } else if (group_->size() > 1) {  // NO_SHARD: DDP's all_reduce
      f.reduce = group_->AllReduceAsync(f.reduce_in.view, ReduceOp::kSum);
    }
  }
  return absl::OkStatus();
}

absl::Status FlatShard::WaitReduceScatterGrads() {
  const CopyStreamScope on_stream = OnCallerStream();
  absl::MutexLock lock(&mu_);
  if (!reducing_) return absl::OkStatus();
  absl::Status status;
  for (auto& fp : flats_) {
    Flat& f = *fp;
    if (f.frozen) continue;
    absl::Status s = Wait(f.reduce);
    if (s.ok()) {
      const TensorRef shard = f.reduce_direct       ? f.shard_grad.view
                              : f.reduce_out.live() ? f.reduce_out.view
                                                    : f.reduce_in.view;
      if (options_.replicate_group != nullptr) {
        s = options_.replicate_group->AllReduce(shard, ReduceOp::kSum);
      }
      if (s.ok() && !f.reduce_direct) s = AddInto(f.shard_grad.view, shard);
    }
    if (status.ok()) status = s;
    f.reduce_in.Free();
    f.reduce_out.Free();
  }
  reducing_ = false;
  Record(Event::kReduceDone);
  Account();
  return status;
}

void FlatShard::DiscardFullGrads() {
  const CopyStreamScope on_stream = OnCallerStream();
  absl::MutexLock lock(&mu_);
  for (auto& f : flats_) f->full_grad.Free();
  grads_live_ = false;
  Account();
}

absl::Status FlatShard::ReduceScatterGrads() {
  DK_RETURN_IF_ERROR(StartReduceScatterGrads());
  return WaitReduceScatterGrads();
}

bool FlatShard::is_reducing() const {
  absl::MutexLock lock(&mu_);
  return reducing_;
}

void FlatShard::FailAllocationForTesting(int n) { fail_allocation_in = n; }

// ---- The shard --------------------------------------------------------------

TensorRef FlatShard::Shard(int flat) const { return flats_[flat]->shard.view; }

TensorRef FlatShard::ShardGrad(int flat) const {
  return flats_[flat]->shard_grad.view;
}

bool FlatShard::flat_frozen(int flat) const { return flats_[flat]->frozen; }

void FlatShard::ZeroShardGrads() {
  const CopyStreamScope on_stream = OnCallerStream();
  for (auto& f : flats_) {
    if (!f->frozen) ZeroFill(f->shard_grad.view).IgnoreError();
  }
}

FlatShard::LocalPiece FlatShard::Piece(int index) const {
  LocalPiece piece;
  if (index < 0 || index >= num_params()) return piece;
  const Placement& p = placements_[index];
  const Flat& f = *flats_[p.flat];
  const int64_t begin = shard_rank_ * f.shard_numel;
  const int64_t lo = std::max(begin, p.offset);
  const int64_t hi = std::min(begin + f.shard_numel, p.offset + p.numel);
  if (hi <= lo) return piece;
  piece.param_offset = lo - p.offset;
  piece.numel = hi - lo;
  piece.data = f.shard.view.Slice(lo - begin, piece.numel);
  if (!f.frozen) piece.grad = f.shard_grad.view.Slice(lo - begin, piece.numel);
  return piece;
}

// ---- Introspection ----------------------------------------------------------

void FlatShard::Record(Event::Kind kind) {
  if (events_.size() == kMaxEvents) events_.pop_front();
  events_.push_back({kind, absl::Now() - created_at_});
}

std::vector<FlatShard::Event> FlatShard::TakeEvents(size_t max) {
  absl::MutexLock lock(&mu_);
  const size_t n = std::min(max, events_.size());
  std::vector<Event> taken(events_.begin(), events_.begin() + n);
  events_.erase(events_.begin(), events_.begin() + n);
  return taken;
}

size_t FlatShard::HeldBytesLocked() const {
  size_t bytes = 0;
  for (const auto& f : flats_) {
    bytes += f->shard.bytes() + f->shard_grad.bytes() + f->gather_in.bytes() +
             f->full_grad.bytes() + f->reduce_in.bytes() +
             f->reduce_out.bytes();
    if (!f->full_is_shard) bytes += f->full.bytes();
  }
  return bytes;
}

void FlatShard::Account() {
  peak_bytes_ = std::max(peak_bytes_, HeldBytesLocked());
}

size_t FlatShard::held_bytes() const {
  absl::MutexLock lock(&mu_);
  return HeldBytesLocked();
}

size_t FlatShard::peak_held_bytes() const {
  absl::MutexLock lock(&mu_);
  return peak_bytes_;
}

}  // namespace distkit
