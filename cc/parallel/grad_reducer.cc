#include "cc/parallel/grad_reducer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/core/device_copy.h"
#include "cc/core/device_staging.h"
#include "cc/core/half.h"
#include "cc/core/status.h"
#include "cc/group/agreement.h"
#include "cc/group/issuer.h"

namespace distkit {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// torch's DDP broadcasts module states in chunks of 250 MiB.
constexpr size_t kBroadcastChunkBytes = 250u << 20;

size_t Bytes(const TensorRef& t) { return t.nbytes(); }

bool IsFloat32(DataType d) { return d == DataType::kFloat32; }

// The checks that need no other rank (on every rank alike when the ranks
// agree on the registration).
absl::Status CheckLocally(const ProcessGroup& group,
                          const std::vector<GradReducer::Parameter>& params,
                          const GradReducer::Options& options) {
  // Also NaN and sizes no size_t holds (1 PiB is past any bucket): their
  // conversion to bytes would be undefined.
  constexpr double kMostMiB = double{1 << 30};
  if (!(options.bucket_cap_mb > 0 && options.bucket_cap_mb <= kMostMiB) ||
      !(options.first_bucket_cap_mb > 0 &&
        options.first_bucket_cap_mb <= kMostMiB)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GradReducer: bucket sizes must be positive and at most 1 PiB "
        "(bucket_cap_mb ",
        options.bucket_cap_mb, ", first_bucket_cap_mb ",
        options.first_bucket_cap_mb, ")"));
  }
  // One device for every parameter (torch's DDP: a module on several
  // devices needs device_ids=None and a model-parallel setup).
  for (size_t i = 1; i < params.size(); ++i) {
    if (params[i].data.device() != params[0].data.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GradReducer: parameters live on several devices: parameter 0 (",
          params[0].name, ") on ", params[0].data.device().ToString(),
          ", parameter ", i, " (", params[i].name, ") on ",
          params[i].data.device().ToString(),
          "; a data-parallel replica must be on one device"));
    }
  }
  const Device comm = group.comm_device();
  if (options.gradient_as_bucket_view && !params.empty() &&
      params[0].data.device() != comm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GradReducer: gradient_as_bucket_view needs the parameters on the "
        "group's comm device (",
        comm.ToString(), "), they are on ", params[0].data.device().ToString(),
        "; use a group whose backend works there or turn the option off"));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const DataType d = params[i].data.dtype();
    if (d != DataType::kFloat32 && d != DataType::kFloat64 &&
        d != DataType::kFloat16 && d != DataType::kBFloat16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GradReducer: parameter ", i, " (", params[i].name, ") is ",
          DataTypeName(d), "; gradients must be floating point"));
    }
  }
  return absl::OkStatus();
}

// ---- Every rank registers the same model -----------------------------------
//
// What must be equal on every rank for the broadcast at construction and the
// bucket all_reduces to pair the same memory (torch's DDP checks the
// parameters at construction too): the header (counts, and the options that
// decide which collectives run) and one record per parameter, then per
// buffer: its dtype and element count. Not its shape: the buckets hold
// elements, and a rank in another language registers flat arrays (Rust's and
// Go's reducers take slices) beside a Python rank's shaped tensors. Nor the
// device: the buckets live on each rank's comm device.

// The header: counts, then the options that change the collectives.
enum HeaderField {
  kParamCount,
  kBufferCount,
  kBucketCap,       // the double's bits
  kFirstBucketCap,  // the double's bits
  kFindUnused,
  kCommHook,
  kBroadcastBuffers,
  kHeaderSize,
};

// A tensor's record: kind, dtype, numel.
constexpr int kRecordSize = 3;
enum Kind { kParameterKind = 1, kBufferKind = 2 };

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The same on every rank, process and machine (absl::Hash is seeded per
// process).
uint64_t HashOf(absl::Span<const int64_t> values, uint64_t h = 0) {
  for (int64_t v : values) h = Mix(h ^ static_cast<uint64_t>(v));
  return h;
}

int64_t Bits(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

double FromBits(int64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof(d));
  return d;
}

void AppendRecord(Kind kind, const TensorRef& t, std::vector<int64_t>& out) {
  out.push_back(kind);
  out.push_back(static_cast<int64_t>(t.dtype()));
  out.push_back(t.numel());
}

// "float32 x128", from a record.
std::string Describe(absl::Span<const int64_t> record) {
  std::string dtype = "dtype " + std::to_string(record[1]);
  if (record[1] >= 0 && record[1] <= static_cast<int64_t>(DataType::kBool)) {
    dtype = std::string(DataTypeName(static_cast<DataType>(record[1])));
  }
  return absl::StrCat(dtype, " x", record[2]);
}

// rank 0's header and `rank`'s differ: the first field that does.
std::string DescribeHeaderMismatch(int rank, absl::Span<const int64_t> rank0,
                                   absl::Span<const int64_t> theirs) {
  const std::string prefix = "GradReducer: DDP expects the same model ";
  struct Count {
    HeaderField field;
    const char* what;
  };
  for (const Count& count :
       {Count{kParamCount, "parameters"}, Count{kBufferCount, "buffers"}}) {
    const int field = count.field;
    const char* what = count.what;
    if (rank0[field] != theirs[field]) {
      return absl::StrCat(prefix, "across all ranks, but rank ", rank, " has ",
                          theirs[field], " ", what, ", while rank 0 has ",
                          rank0[field]);
    }
  }
  auto option = [](int field, int64_t v) -> std::string {
    switch (field) {
      case kBucketCap:
        return absl::StrCat("bucket_cap_mb ", FromBits(v));
      case kFirstBucketCap:
        return absl::StrCat("first_bucket_cap_mb ", FromBits(v));
      case kFindUnused:
        return absl::StrCat("find_unused_parameters ", v ? "true" : "false");
      case kCommHook:
        return absl::StrCat("comm_hook ", v == 0   ? "none"
                                          : v == 1 ? "fp16_compress"
                                          : v == 2 ? "bf16_compress"
                                                   : absl::StrCat(v));
      default:
        return absl::StrCat("broadcast_buffers ", v ? "true" : "false");
    }
  };
  for (int field = kBucketCap; field < kHeaderSize; ++field) {
    if (rank0[field] != theirs[field]) {
      return absl::StrCat(prefix,
                          "and options across all ranks (they decide which "
                          "collectives run), but rank ",
                          rank, " has ", option(field, theirs[field]),
                          ", while rank 0 has ", option(field, rank0[field]));
    }
  }
  return prefix + "across all ranks";  // not reached: the headers differ
}

// Rank `root`'s `text`, on every rank (two broadcasts).
absl::StatusOr<std::string> BroadcastText(ProcessGroup& group, std::string text,
                                          int root) {
  int64_t size = static_cast<int64_t>(text.size());
  DK_RETURN_IF_ERROR(OnCommDevice(
      TensorRef(&size, 1, DataType::kInt64), group.comm_device(),
      Access::kReadWrite,
      [&](const TensorRef& t) { return group.Broadcast(t, root); }));
  text.resize(static_cast<size_t>(size));
  if (size == 0) return text;
  DK_RETURN_IF_ERROR(OnCommDevice(
      TensorRef(text.data(), size, DataType::kUInt8), group.comm_device(),
      Access::kReadWrite,
      [&](const TensorRef& t) { return group.Broadcast(t, root); }));
  return text;
}

// Collective over `group`, before any other: whether every rank registered
// the same parameters, buffers and options as rank 0, and whether any rank
// has a problem of its own (`local`). When they all agree and none has, one
// all_reduce of three integers; otherwise an error on every rank (the same
// INVALID_ARGUMENT naming the first difference from rank 0), so that no rank
// goes on into the broadcast alone.
absl::Status CheckAcrossRanks(ProcessGroup& group,
                              const std::vector<GradReducer::Parameter>& params,
                              const std::vector<TensorRef>& buffers,
                              const GradReducer::Options& options,
                              const absl::Status& local) {
  const CopyStreamScope on_stream(group.comm_device(), group.cuda_stream());
  std::vector<int64_t> header(kHeaderSize);
  header[kParamCount] = static_cast<int64_t>(params.size());
  header[kBufferCount] = static_cast<int64_t>(buffers.size());
  header[kBucketCap] = Bits(options.bucket_cap_mb);
  header[kFirstBucketCap] = Bits(options.first_bucket_cap_mb);
  header[kFindUnused] = options.find_unused_parameters;
  header[kCommHook] = static_cast<int64_t>(options.comm_hook);
  header[kBroadcastBuffers] = options.broadcast_buffers;
  std::vector<int64_t> records;
  records.reserve((params.size() + buffers.size()) * kRecordSize);
  for (const GradReducer::Parameter& p : params)
    AppendRecord(kParameterKind, p.data, records);
  for (const TensorRef& b : buffers) AppendRecord(kBufferKind, b, records);
  // max(digest) and max(~digest) = ~min(digest): equal on every rank only
  // when every rank has the same digest. Then whether any rank has a problem.
  const int64_t digest = static_cast<int64_t>(HashOf(records, HashOf(header)));
  int64_t summary[3] = {digest, ~digest, local.ok() ? 0 : 1};
  DK_RETURN_IF_ERROR(OnCommDevice(
      TensorRef(summary, 3, DataType::kInt64), group.comm_device(),
      Access::kReadWrite,
      [&](const TensorRef& t) { return group.AllReduce(t, ReduceOp::kMax); }));
  if (summary[0] == ~summary[1]) {
    if (summary[2] == 0) return absl::OkStatus();
    // Every rank registered the same model, some rank cannot use it: one
    // with a problem of its own says what it is (its own devices, say), the
    // others name the lowest rank with one.
    DK_ASSIGN_OR_RETURN(Verdict verdict,
                        AgreeOnVerdict(group, Verdict::Mine(group, local)));
    if (verdict.ok()) return absl::OkStatus();  // not reached
    const bool own = !local.ok();
    const absl::Status& problem = own ? local : verdict.status;
    return absl::Status(
        problem.code(),
        absl::StrCat(problem.message(), " (rank ",
                     own ? group.rank() : verdict.RankIn(group), ")"));
  }
  // Some rank differs from rank 0: find where, alike on every rank.
  DK_ASSIGN_OR_RETURN(std::optional<ValueMismatch> header_mismatch,
                      FindValueMismatch(group, header, kHeaderSize));
  if (header_mismatch.has_value()) {
    return absl::InvalidArgumentError(DescribeHeaderMismatch(
        header_mismatch->rank, header_mismatch->rank0_values,
        header_mismatch->rank_values));
  }
  DK_ASSIGN_OR_RETURN(std::optional<ValueMismatch> mismatch,
                      FindValueMismatch(group, records, kRecordSize));
  if (!mismatch.has_value() || mismatch->record < 0) {
    return absl::InternalError(
        "GradReducer: the ranks' registrations hash differently but no "
        "parameter or buffer differs");
  }
  const ValueMismatch& m = *mismatch;
  const bool is_param = m.record < static_cast<int64_t>(params.size());
  const int64_t index = is_param ? m.record : m.record - params.size();
  // Rank 0's name for it, so that every rank says the same.
  DK_ASSIGN_OR_RETURN(
      std::string name,
      BroadcastText(group, is_param ? params[index].name : "", 0));
  const std::string what =
      is_param ? absl::StrCat("parameter ", index,
                              name.empty() ? "" : absl::StrCat(" (", name, ")"))
               : absl::StrCat("buffer ", index);
  return absl::InvalidArgumentError(absl::StrCat(
      "GradReducer: DDP expects the same model across all ranks, but rank ",
      m.rank, "'s ", what, " is ", Describe(m.rank_values),
      ", while rank 0's is ", Describe(m.rank0_values)));
}

}  // namespace

// A bucket lives on the group's comm device (the host for Gloo, cuda:<k>
// for NCCL): gradients on another device are copied in and out there
// (mmengine's casting rule), never read as host memory.
struct GradReducer::Bucket {
  DataType dtype = DataType::kFloat32;
  int64_t numel = 0;
  Device device;
  DeviceBuffer storage;
  size_t bytes = 0;
  std::vector<uint16_t> compressed;   // fp16 / bf16 copy for the hooks (host)
  DeviceBuffer compressed_on_device;  // that copy on a non-host comm device
  std::vector<int> params;
  int pending = 0;
  bool launched = false;
  std::shared_ptr<Work> work;
  BucketTrace trace;

  char* data() { return static_cast<char*>(storage.data()); }
  TensorRef tensor() { return TensorRef(data(), numel, dtype, device); }
  TensorRef compressed_tensor(DataType half) {
    void* p = device.is_cpu() ? static_cast<void*>(compressed.data())
                              : compressed_on_device.data();
    return TensorRef(p, numel, half, device);
  }
};

GradReducer::GradReducer(std::shared_ptr<ProcessGroup> group,
                         std::vector<Parameter> params,
                         std::vector<TensorRef> buffers, Options options)
    : group_(std::move(group)),
      params_(std::move(params)),
      buffers_(std::move(buffers)),
      options_(options) {}

GradReducer::~GradReducer() {
  // Buckets may be in flight if an iteration was abandoned: wait, so the
  // backend never writes freed memory.
  absl::MutexLock lock(&mu_);
  for (auto& b : bucket_state_) {
    if (b->work != nullptr) b->work->Wait().IgnoreError();
  }
  // Copies queued on the caller's stream may still use the buckets.
  const CopyStreamScope on_stream = OnCallerStream();
  SynchronizeCopyStream().IgnoreError();
}

absl::StatusOr<std::unique_ptr<GradReducer>> GradReducer::Create(
    std::shared_ptr<ProcessGroup> group, std::vector<Parameter> params,
    std::vector<TensorRef> buffers, Options options) {
  if (group == nullptr || !group->is_member()) {
    return absl::FailedPreconditionError(
        "GradReducer: this rank is not a member of the group");
  }
  // Problems of this rank's own are not returned at once: a rank that left
  // here would leave the others waiting in the check below.
  const absl::Status local = CheckLocally(*group, params, options);
  if (group->size() > 1) {
    DK_RETURN_IF_ERROR(
        CheckAcrossRanks(*group, params, buffers, options, local));
  }
  DK_RETURN_IF_ERROR(local);
  std::unique_ptr<GradReducer> r(new GradReducer(
      std::move(group), std::move(params), std::move(buffers), options));
  const CopyStreamScope on_stream = r->OnCallerStream();
  std::vector<TensorRef> states;
  for (const Parameter& p : r->params_) states.push_back(p.data);
  for (const TensorRef& b : r->buffers_) states.push_back(b);
  DK_RETURN_IF_ERROR(r->Broadcast(states));
  absl::MutexLock lock(&r->mu_);
  DK_RETURN_IF_ERROR(r->BuildBuckets(ReverseOrder(r->params_.size())));
  return r;
}

absl::Status GradReducer::Broadcast(absl::Span<const TensorRef> tensors) {
  if (group_->size() == 1) return absl::OkStatus();
  // Flatten by dtype into chunks of at most kBroadcastChunkBytes, one
  // broadcast each (torch's _sync_module_states).
  std::map<DataType, std::vector<TensorRef>> by_dtype;
  for (const TensorRef& t : tensors) by_dtype[t.dtype()].push_back(t);
  for (auto& [dtype, list] : by_dtype) {
    size_t i = 0;
    while (i < list.size()) {
      size_t j = i, bytes = 0;
      while (j < list.size() &&
             (j == i || bytes + Bytes(list[j]) <= kBroadcastChunkBytes)) {
        bytes += Bytes(list[j++]);
      }
      // Flattened on the comm device, from and back to each tensor's own.
      const Device comm = group_->comm_device();
      DK_ASSIGN_OR_RETURN(DeviceBuffer flat,
                          DeviceBuffer::Allocate(comm, bytes));
      char* base = static_cast<char*>(flat.data());
      size_t at = 0;
      for (size_t k = i; k < j; ++k) {
        DK_RETURN_IF_ERROR(CopyBytes(base + at, comm, list[k].data(),
                                     list[k].device(), Bytes(list[k])));
        at += Bytes(list[k]);
      }
      DK_RETURN_IF_ERROR(group_->Broadcast(
          TensorRef(base, bytes / ElementSize(dtype), dtype, comm), 0));
      at = 0;
      for (size_t k = i; k < j; ++k) {
        DK_RETURN_IF_ERROR(CopyBytes(list[k].data(), list[k].device(),
                                     base + at, comm, Bytes(list[k])));
        at += Bytes(list[k]);
      }
      i = j;
    }
  }
  return absl::OkStatus();
}

absl::Status GradReducer::BroadcastBuffers() {
  const CopyStreamScope on_stream = OnCallerStream();
  return Broadcast(buffers_);
}

absl::Status GradReducer::BuildBuckets(absl::Span<const int> order) {
  const Device comm = group_->comm_device();
  std::vector<ParamShape> shapes;
  for (const Parameter& p : params_)
    shapes.push_back({p.data.numel(), p.data.dtype()});
  buckets_ = AssignBuckets(
      shapes, order, static_cast<size_t>(options_.first_bucket_cap_mb * kMiB),
      static_cast<size_t>(options_.bucket_cap_mb * kMiB));
  for (auto& b : bucket_state_) retired_.push_back(std::move(b));
  bucket_state_.clear();
  bucket_of_.assign(params_.size(), -1);
  offset_of_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    bucket->device = comm;
    bucket->dtype = params_[buckets_[b][0]].data.dtype();
    bucket->params = buckets_[b];
    size_t bytes = 0;
    for (int i : buckets_[b]) {
      bucket_of_[i] = b;
      offset_of_[i] = bytes;
      bytes += Bytes(params_[i].data);
      bucket->numel += params_[i].data.numel();
    }
    DK_ASSIGN_OR_RETURN(bucket->storage, DeviceBuffer::Allocate(comm, bytes));
    DK_RETURN_IF_ERROR(ZeroBytes(bucket->data(), comm, bytes));
    bucket->bytes = bytes;
    bucket->trace.bucket = b;
    bucket->trace.bytes = bytes;
    bucket_state_.push_back(std::move(bucket));
  }
  ready_.assign(params_.size(), false);
  grads_.assign(params_.size(), TensorRef());
  locally_used_.assign(params_.size(), 0);
  if (globally_used_.size() != params_.size())
    globally_used_.assign(params_.size(), 1);
  ++view_generation_;
  return absl::OkStatus();
}

absl::StatusOr<TensorRef> GradReducer::GradView(int index) {
  if (!options_.gradient_as_bucket_view) {
    return absl::FailedPreconditionError(
        "GradReducer::GradView needs gradient_as_bucket_view");
  }
  return ReducedGrad(index);
}

absl::StatusOr<TensorRef> GradReducer::ReducedGrad(int index) {
  absl::MutexLock lock(&mu_);
  if (index < 0 || index >= static_cast<int>(params_.size())) {
    return absl::OutOfRangeError(absl::StrCat("GradReducer: parameter index ",
                                              index, " out of range [0, ",
                                              params_.size(), ")"));
  }
  Bucket& b = *bucket_state_[bucket_of_[index]];
  return TensorRef(b.data() + offset_of_[index], params_[index].data.shape(),
                   params_[index].data.dtype(), b.device);
}

int64_t GradReducer::view_generation() const {
  absl::MutexLock lock(&mu_);
  return view_generation_;
}

bool GradReducer::globally_used(int index) const {
  absl::MutexLock lock(&mu_);
  return index >= 0 && index < static_cast<int>(globally_used_.size()) &&
         globally_used_[index] != 0;
}

int64_t GradReducer::iteration() const {
  absl::MutexLock lock(&mu_);
  return iteration_;
}

bool GradReducer::iteration_started() const {
  absl::MutexLock lock(&mu_);
  return in_iteration_;
}

void GradReducer::set_require_sync(bool require_sync) {
  absl::MutexLock lock(&mu_);
  require_sync_ = require_sync;
}

bool GradReducer::require_sync() const {
  absl::MutexLock lock(&mu_);
  return require_sync_;
}

GradReducer::IterationTrace GradReducer::last_trace() const {
  absl::MutexLock lock(&mu_);
  return trace_;
}

void GradReducer::ResetIteration() {
  std::fill(ready_.begin(), ready_.end(), false);
  std::fill(locally_used_.begin(), locally_used_.end(), 0);
  for (auto& b : bucket_state_) {
    b->pending = static_cast<int>(b->params.size());
    b->launched = false;
    b->work = nullptr;
  }
  next_launch_ = 0;
  kept_.clear();
}

absl::Status GradReducer::PrepareForBackward(absl::Span<const int> unused) {
  absl::MutexLock lock(&mu_);
  const CopyStreamScope on_stream = OnCallerStream();
  if (!require_sync_) return absl::OkStatus();
  return PrepareLocked(unused);
}

absl::Status GradReducer::PrepareLocked(absl::Span<const int> unused) {
  if (!unused.empty() && !options_.find_unused_parameters) {
    return absl::InvalidArgumentError(
        "GradReducer: unused parameters were named but find_unused_parameters "
        "is off");
  }
  if (!in_iteration_) {
    ResetIteration();
    in_iteration_ = true;
    prepared_at_ = absl::Now();
    issuer_ = CurrentIssuer();
  }
  for (int i : unused) {
    if (i < 0 || i >= static_cast<int>(params_.size())) {
      return absl::OutOfRangeError(absl::StrCat(
          "GradReducer: unused parameter index ", i, " out of range"));
    }
    if (ready_[i]) continue;
    // A zero contribution from this rank.
    Bucket& b = *bucket_state_[bucket_of_[i]];
    DK_RETURN_IF_ERROR(
        ZeroBytes(b.data() + offset_of_[i], b.device, Bytes(params_[i].data)));
    grads_[i] = TensorRef();
    MarkReadyLocked(i);
  }
  LaunchReady();
  return absl::OkStatus();
}

absl::Status GradReducer::MarkReady(int index, TensorRef grad) {
  return MarkReadyImpl(index, grad, /*used=*/true);
}

absl::Status GradReducer::MarkUnusedReady(int index, TensorRef grad) {
  if (!options_.find_unused_parameters) {
    return absl::InvalidArgumentError(
        "GradReducer: MarkUnusedReady without find_unused_parameters");
  }
  return MarkReadyImpl(index, grad, /*used=*/false);
}

absl::Status GradReducer::MarkReadyImpl(int index, TensorRef grad, bool used) {
  absl::MutexLock lock(&mu_);
  const CopyStreamScope on_stream = OnCallerStream();
  if (!require_sync_) return absl::OkStatus();
  if (index < 0 || index >= static_cast<int>(params_.size())) {
    return absl::OutOfRangeError(absl::StrCat("GradReducer: parameter index ",
                                              index, " out of range [0, ",
                                              params_.size(), ")"));
  }
  const Parameter& p = params_[index];
  if (grad.device() != p.data.device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GradReducer: gradient of parameter ", index, " (", p.name,
                     ") is on ", grad.device().ToString(),
                     ", the parameter on ", p.data.device().ToString()));
  }
  if (grad.numel() != p.data.numel() || grad.dtype() != p.data.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GradReducer: gradient of parameter ", index, " (", p.name, ") is ",
        DataTypeName(grad.dtype()), " x", grad.numel(), ", expected ",
        DataTypeName(p.data.dtype()), " x", p.data.numel()));
  }
  if (!in_iteration_) DK_RETURN_IF_ERROR(PrepareLocked({}));
  if (ready_[index]) {
    return absl::FailedPreconditionError(
        absl::StrCat("GradReducer: parameter ", index, " (", p.name,
                     ") was marked ready twice in one iteration (iteration ",
                     iteration_, ")"));
  }
  Bucket& b = *bucket_state_[bucket_of_[index]];
  char* slot = b.data() + offset_of_[index];
  if (grad.data() != slot) {
    DK_RETURN_IF_ERROR(
        CopyBytes(slot, b.device, grad.data(), grad.device(), Bytes(grad)));
  } else if (!used) {
    std::vector<char> value(Bytes(grad));
    DK_RETURN_IF_ERROR(
        CopyBytes(value.data(), Device::Cpu(), slot, b.device, value.size()));
    kept_.emplace_back(index, std::move(value));
  }
  grads_[index] = grad;
  if (used) locally_used_[index] = 1;
  if (iteration_ == 0) ready_order_.push_back(index);
  MarkReadyLocked(index);
  LaunchReady();
  return absl::OkStatus();
}

void GradReducer::MarkReadyLocked(int index) {
  ready_[index] = true;
  --bucket_state_[bucket_of_[index]]->pending;
}

void GradReducer::LaunchReady() {
  // Launch in bucket order only: every rank must issue the same all_reduces
  // in the same order, whatever order its gradients arrive in.
  while (next_launch_ < bucket_state_.size() &&
         bucket_state_[next_launch_]->pending == 0) {
    Launch(*bucket_state_[next_launch_++]);
  }
}

void GradReducer::Launch(Bucket& b) {
  const IssuerScope as(issuer_);
  const int n = group_->size();
  b.launched = true;
  b.trace.launched_after_prepare = absl::Now() - prepared_at_;
  if (options_.comm_hook != CommHook::kNone && IsFloat32(b.dtype)) {
    // Compress, divide in the compressed type (as torch's hooks do), reduce.
    // On a device comm device the bucket goes through the host for it.
    std::vector<float> host;
    const float* src = reinterpret_cast<const float*>(b.data());
    if (!b.device.is_cpu()) {
      host.resize(b.numel);
      absl::Status copied =
          CopyBytes(host.data(), Device::Cpu(), b.data(), b.device, b.bytes);
      if (!copied.ok()) return Fail(b, copied);
      src = host.data();
    }
    b.compressed.resize(b.numel);
    const bool fp16 = options_.comm_hook == CommHook::kFp16Compress;
    for (int64_t k = 0; k < b.numel; ++k) {
      if (fp16) {
        const uint16_t h = FloatToFloat16(src[k]);
        b.compressed[k] = FloatToFloat16(Float16ToFloat(h) / n);
      } else {
        const uint16_t h = FloatToBFloat16(src[k]);
        b.compressed[k] = FloatToBFloat16(BFloat16ToFloat(h) / n);
      }
    }
    const DataType half = fp16 ? DataType::kFloat16 : DataType::kBFloat16;
    if (!b.device.is_cpu()) {
      absl::Status staged = StageCompressed(b);
      if (!staged.ok()) return Fail(b, staged);
    }
    b.work = group_->AllReduceAsync(b.compressed_tensor(half), ReduceOp::kSum);
    return;
  }
  if (b.device.is_cpu()) {
    // torch's order: divide, then sum (bit-equal averages to torch DDP).
    DivideBySize(b.data(), b.dtype, b.numel, n);
    b.work = group_->AllReduceAsync(b.tensor(), ReduceOp::kSum);
    return;
  }
  // On a device, the mean is the backend's (ncclAvg) or the contract's
  // division there: gradients are never read on the host.
  b.work = group_->AllReduceAsync(b.tensor(), ReduceOp::kMean);
}

absl::Status GradReducer::StageCompressed(Bucket& b) {
  const size_t bytes = b.compressed.size() * sizeof(uint16_t);
  if (b.compressed_on_device.data() == nullptr) {
    DK_ASSIGN_OR_RETURN(b.compressed_on_device,
                        DeviceBuffer::Allocate(b.device, bytes));
  }
  return CopyBytes(b.compressed_on_device.data(), b.device, b.compressed.data(),
                   Device::Cpu(), bytes);
}

void GradReducer::Fail(Bucket& b, const absl::Status& status) {
  // A Work that has already failed: Finalize reports it like a failed
  // all_reduce.
  b.work = std::make_shared<Work>("gradient bucket");
  b.work->Complete(status);
}

absl::Status GradReducer::Finalize() {
  absl::MutexLock lock(&mu_);
  const CopyStreamScope on_stream = OnCallerStream();
  if (!require_sync_) return absl::OkStatus();
  if (!in_iteration_) {
    return absl::FailedPreconditionError(
        "GradReducer::Finalize: no gradient was marked ready in this "
        "iteration");
  }
  const absl::Time finalize_start = absl::Now();
  trace_ = IterationTrace();
  trace_.finalize_started_after_prepare = finalize_start - prepared_at_;
  // Parameters that got no gradient: an error unless find_unused_parameters.
  std::vector<std::string> missing_names;
  std::vector<std::string> missing_indices;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!ready_[i]) {
      missing_names.push_back(params_[i].name.empty() ? absl::StrCat("#", i)
                                                      : params_[i].name);
      missing_indices.push_back(absl::StrCat(i));
    }
  }
  if (!missing_names.empty() && !options_.find_unused_parameters) {
    // Buckets already launched finish; none of the others start (the same
    // parameters are missing on every rank that runs the same model).
    for (auto& b : bucket_state_)
      if (b->work != nullptr) b->work->Wait().IgnoreError();
    in_iteration_ = false;
    return absl::FailedPreconditionError(absl::StrCat(
        "Expected to have finished reduction in the prior iteration before "
        "starting a new one. This error indicates that your module has "
        "parameters that were not used in producing loss. You can enable "
        "unused parameter detection by passing find_unused_parameters=True. "
        "Parameters which did not receive grad for rank ",
        group_->rank(), ": ", absl::StrJoin(missing_names, ", "),
        ". Parameter indices which did not receive grad for rank ",
        group_->rank(), ": ", absl::StrJoin(missing_indices, " ")));
  }
  if (!missing_names.empty()) {
    std::vector<int> unused;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) unused.push_back(i);
    DK_RETURN_IF_ERROR(PrepareLocked(unused));
  }
  for (auto& b : bucket_state_) b->trace.done_before_finalize = b->work->Test();
  absl::Status status;
  for (auto& b : bucket_state_) status.Update(b->work->Wait());
  trace_.finalize_wait = absl::Now() - finalize_start;
  if (status.ok() && options_.find_unused_parameters) {
    globally_used_ = locally_used_;
    status.Update(OnCommDevice(
        TensorRef(globally_used_.data(), globally_used_.size(),
                  DataType::kInt32),
        group_->comm_device(), Access::kReadWrite, [&](const TensorRef& t) {
          return group_->AllReduce(t, ReduceOp::kSum);
        }));
  }
  in_iteration_ = false;
  if (!status.ok()) return status;
  // Decompress and write back.
  for (auto& b : bucket_state_) {
    trace_.buckets.push_back(b->trace);
    if (!b->compressed.empty() && options_.comm_hook != CommHook::kNone &&
        IsFloat32(b->dtype)) {
      DK_RETURN_IF_ERROR(Decompress(*b));
    }
    for (int i : b->params) {
      if (!globally_used_[i]) continue;  // unused everywhere: untouched
      const TensorRef& g = grads_[i];
      const char* slot = b->data() + offset_of_[i];
      if (g.data() != nullptr && g.data() != slot) {
        DK_RETURN_IF_ERROR(
            CopyBytes(g.data(), g.device(), slot, b->device, Bytes(g)));
      }
    }
  }
  // Unused everywhere, a gradient that is its slot gets its value back
  // (after the decompression, which writes every slot).
  for (const auto& [i, value] : kept_) {
    if (globally_used_[i]) continue;
    Bucket& b = *bucket_state_[bucket_of_[i]];
    DK_RETURN_IF_ERROR(CopyBytes(b.data() + offset_of_[i], b.device,
                                 value.data(), Device::Cpu(), value.size()));
  }
  kept_.clear();
  ++iteration_;
  if (iteration_ == 1 && !rebuilt_ && !options_.find_unused_parameters) {
    DK_RETURN_IF_ERROR(RebuildBuckets());
  }
  return absl::OkStatus();
}

void GradReducer::AbandonIteration() {
  absl::MutexLock lock(&mu_);
  if (!in_iteration_) return;
  for (auto& b : bucket_state_) {
    if (b->work != nullptr) b->work->Wait().IgnoreError();
  }
  std::fill(grads_.begin(), grads_.end(), TensorRef());
  // The first iteration's order of readiness decides the rebuilt buckets:
  // only a finished one counts.
  if (iteration_ == 0) ready_order_.clear();
  ResetIteration();
  in_iteration_ = false;
}

absl::Status GradReducer::Decompress(Bucket& b) {
  const size_t half_bytes = b.compressed.size() * sizeof(uint16_t);
  if (!b.device.is_cpu()) {
    DK_RETURN_IF_ERROR(CopyBytes(b.compressed.data(), Device::Cpu(),
                                 b.compressed_on_device.data(), b.device,
                                 half_bytes));
  }
  std::vector<float> host;
  float* dst = reinterpret_cast<float*>(b.data());
  if (!b.device.is_cpu()) {
    host.resize(b.numel);
    dst = host.data();
  }
  const bool fp16 = options_.comm_hook == CommHook::kFp16Compress;
  for (int64_t k = 0; k < b.numel; ++k) {
    dst[k] = fp16 ? Float16ToFloat(b.compressed[k])
                  : BFloat16ToFloat(b.compressed[k]);
  }
  if (b.device.is_cpu()) return absl::OkStatus();
  return CopyBytes(b.data(), b.device, host.data(), Device::Cpu(), b.bytes);
}

absl::Status GradReducer::RebuildBuckets() {
  rebuilt_ = true;
  // Rank 0's ready order, so every rank builds the same buckets.
  std::vector<int64_t> order(params_.size(), -1);
  if (ready_order_.size() == params_.size()) {
    for (size_t k = 0; k < order.size(); ++k) order[k] = ready_order_[k];
  }
  DK_RETURN_IF_ERROR(OnCommDevice(
      TensorRef(order.data(), order.size(), DataType::kInt64),
      group_->comm_device(), Access::kReadWrite,
      [&](const TensorRef& t) { return group_->Broadcast(t, 0); }));
  if (order.empty() || order[0] < 0) return absl::OkStatus();  // keep as is
  std::vector<int> new_order(order.begin(), order.end());
  // Keep the gradients that live in the old buckets (view mode) by copying
  // them into the new ones.
  std::vector<std::vector<char>> saved(params_.size());
  if (options_.gradient_as_bucket_view) {
    for (size_t i = 0; i < params_.size(); ++i) {
      const Bucket& b = *bucket_state_[bucket_of_[i]];
      saved[i].resize(Bytes(params_[i].data));
      DK_RETURN_IF_ERROR(
          CopyBytes(saved[i].data(), Device::Cpu(),
                    static_cast<const char*>(b.storage.data()) + offset_of_[i],
                    b.device, saved[i].size()));
    }
  }
  DK_RETURN_IF_ERROR(BuildBuckets(new_order));
  if (options_.gradient_as_bucket_view) {
    for (size_t i = 0; i < params_.size(); ++i) {
      Bucket& b = *bucket_state_[bucket_of_[i]];
      DK_RETURN_IF_ERROR(CopyBytes(b.data() + offset_of_[i], b.device,
                                   saved[i].data(), Device::Cpu(),
                                   saved[i].size()));
    }
  }
  return absl::OkStatus();
}

}  // namespace distkit
