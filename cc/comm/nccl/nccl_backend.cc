#include "cc/comm/nccl/nccl_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/comm/nccl/nccl_library.h"
#include "cc/comm/nccl/pinned_pool.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/comm/shm/host_map.h"
#include "cc/core/cuda_library.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/store/call_deadline.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

// How often a waiting operation asks NCCL for asynchronous errors (a peer
// died) between its event polls.
constexpr absl::Duration kHealthPeriod = absl::Milliseconds(50);

ncclDataType_t NcclType(DataType d) {
  switch (d) {
    case DataType::kFloat16:
      return ncclHalf;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat;
    case DataType::kFloat64:
      return ncclDouble;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kUInt8:
    case DataType::kBool:
      return ncclUint8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  return ncclUint8;
}

bool IsFloat(DataType d) {
  return d == DataType::kFloat16 || d == DataType::kBFloat16 ||
         d == DataType::kFloat32 || d == DataType::kFloat64;
}

// What NCCL can reduce: every op on floats and integers except the bitwise
// ones; on bool, band and product as min (AND), bor and sum as max (OR), as
// torch's ProcessGroupNCCL maps them and distkit's gloo computes them.
bool NcclCanReduce(ReduceOp op, DataType d) {
  if (d == DataType::kBool) {
    return op == ReduceOp::kBand || op == ReduceOp::kBor ||
           op == ReduceOp::kMin || op == ReduceOp::kMax ||
           op == ReduceOp::kSum || op == ReduceOp::kProduct;
  }
  return op != ReduceOp::kBand && op != ReduceOp::kBor && op != ReduceOp::kBxor;
}

// The NCCL reduction for (op, dtype), which CheckReduce accepted.
ncclRedOp_t NcclOp(ReduceOp op, DataType d) {
  if (d == DataType::kBool) {
    // Bytes of 0 or 1 (any nonzero byte reads as true): min is AND, max OR.
    return op == ReduceOp::kSum || op == ReduceOp::kBor || op == ReduceOp::kMax
               ? ncclMax
               : ncclMin;
  }
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMean:
      return ncclAvg;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      break;
  }
  return ncclSum;
}

char* At(const TensorRef& t, int64_t elements) {
  return static_cast<char*>(t.data()) + elements * ElementSize(t.dtype());
}

}  // namespace

NcclBackend::NcclBackend(const CudaLibrary* cuda, const NcclLibrary* nccl,
                         std::shared_ptr<Store> store, int rank, int size,
                         int device)
    : cuda_(cuda),
      nccl_(nccl),
      store_(std::move(store)),
      rank_(rank),
      size_(size),
      device_(device),
      name_(absl::StrCat("rank ", rank, " of ", size)) {}

absl::Status NcclBackend::UseDevice() {
  return CudaStatus(*cuda_, cuda_->SetDevice(device_), "cudaSetDevice");
}

absl::StatusOr<std::unique_ptr<NcclBackend::Channel>> NcclBackend::MakeChannel(
    std::unique_ptr<NcclComm> comm) {
  auto channel = std::make_unique<Channel>();
  channel->comm = std::move(comm);
  absl::Status made = [&]() -> absl::Status {
    DK_RETURN_IF_ERROR(UseDevice());
    DK_RETURN_IF_ERROR(CudaStatus(
        *cuda_,
        cuda_->StreamCreateWithFlags(&channel->stream, cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags"));
    for (cudaEvent_t* e : {&channel->ready, &channel->done}) {
      DK_RETURN_IF_ERROR(CudaStatus(
          *cuda_, cuda_->EventCreateWithFlags(e, cudaEventDisableTiming),
          "cudaEventCreateWithFlags"));
    }
    return absl::OkStatus();
  }();
  if (!made.ok()) {
    // A Channel has no destructor: what was made so far goes here.
    DestroyChannel(*channel);
    return made;
  }
  return channel;
}

void NcclBackend::DestroyChannel(Channel& channel) {
  channel.comm.reset();  // finalizes (bounded) or aborts
  // What a failed or aborted operation left queued (the signatures' copy to
  // pinned memory, staging copies) must be over before that memory goes:
  // after the communicator is gone, NCCL's part of it ends at once.
  if (channel.stream != nullptr) cuda_->StreamSynchronize(channel.stream);
  channel.staging = DeviceBuffer();
  if (channel.done != nullptr) cuda_->EventDestroy(channel.done);
  if (channel.ready != nullptr) cuda_->EventDestroy(channel.ready);
  if (channel.stream != nullptr) cuda_->StreamDestroy(channel.stream);
}

absl::Status NcclBackend::CanRun() {
  if (absl::Status s = CudaUsable(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the nccl backend needs a CUDA GPU, and none is usable on this "
        "machine (",
        s.message(), "); use backend 'gloo' for CPU tensors"));
  }
  if (absl::StatusOr<const NcclLibrary*> nccl = LoadNcclLibrary(); !nccl.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the nccl backend cannot run: ", nccl.status().message()));
  }
  return absl::OkStatus();
}

namespace {

// Every rank says whether it can run NCCL before any rank enters
// ncclCommInitRank, which waits for all ranks without a deadline: a rank
// without a GPU or libnccl then fails every rank at once, naming itself,
// instead of leaving the others blocked.
absl::Status AgreeToStart(const BackendConfig& config,
                          const absl::Status& mine) {
  DK_RETURN_IF_ERROR(config.store->Set(
      absl::StrCat("can_run/", config.rank),
      mine.ok() ? std::string("ok") : std::string(mine.message())));
  if (!mine.ok()) return mine;
  std::vector<std::string> keys;
  for (int r = 0; r < config.size; ++r) {
    keys.push_back(absl::StrCat("can_run/", r));
  }
  DK_ASSIGN_OR_RETURN(std::vector<std::string> answers,
                      config.store->MultiGetWithTimeout(keys, config.timeout));
  for (int r = 0; r < config.size; ++r) {
    if (answers[r] != "ok") {
      return absl::FailedPreconditionError(absl::StrCat(
          "the nccl backend cannot start: rank ", r, " reports: ", answers[r]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclBackend>> NcclBackend::Create(
    const BackendConfig& config) {
  DK_RETURN_IF_ERROR(AgreeToStart(config, CanRun()));
  // Where this rank runs, so that the group's roll call after a lost or late
  // rank can name its host (ProcessGroup::HostsOf), as Gloo's names it.
  DK_RETURN_IF_ERROR(config.store->Set(absl::StrCat("hosts/host/", config.rank),
                                       HostIdentity()));
  const CudaLibrary* cuda = *LoadCudaLibrary();
  const NcclLibrary* nccl = *LoadNcclLibrary();
  const int device = config.local_rank % CudaDeviceCount();
  // Within init's, a shrink's or a grow's deadline where one holds: the
  // communicator's own wait is no store call, so nothing else clamps it.
  const absl::Time deadline =
      absl::Now() + ClampToStoreDeadline(config.timeout);
  std::unique_ptr<NcclBackend> b(new NcclBackend(
      cuda, nccl, config.store, config.rank, config.size, device));
  DK_RETURN_IF_ERROR(b->UseDevice());
  // Rank 0's ncclUniqueId reaches the others through the group's store.
  ncclUniqueId id;
  if (config.rank == 0) {
    DK_RETURN_IF_ERROR(
        NcclStatus(*nccl, nccl->GetUniqueId(&id), "ncclGetUniqueId"));
    DK_RETURN_IF_ERROR(config.store->Set(
        "unique_id", absl::string_view(id.internal, sizeof(id.internal))));
  } else {
    DK_ASSIGN_OR_RETURN(std::string bytes,
                        config.store->Get("unique_id", config.timeout));
    if (bytes.size() != sizeof(id.internal)) {
      return absl::DataLossError("nccl: malformed ncclUniqueId in the store");
    }
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  DK_ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> comm,
                      NcclComm::Init(cuda, nccl, device, config.size, id,
                                     config.rank, deadline, nullptr, b->name_));
  DK_ASSIGN_OR_RETURN(b->collectives_, b->MakeChannel(std::move(comm)));
  DK_RETURN_IF_ERROR(b->InitAgreement());
  return b;
}

NcclBackend::~NcclBackend() {
  absl::flat_hash_map<std::pair<int, int>, std::unique_ptr<Channel>> pairs;
  {
    absl::MutexLock lock(&mu_);
    pairs.swap(pairs_);
  }
  // Events and streams belong to the device; the communicators switch on
  // their own.
  UseDevice().IgnoreError();
  for (auto& [key, channel] : pairs) DestroyChannel(*channel);
  if (collectives_ != nullptr) DestroyChannel(*collectives_);
  signatures_device_ = DeviceBuffer();
  // Back to the pool, not cudaFreeHost, which would wait for every group's
  // work on the device (pinned_pool.h).
  GivePinned(signatures_host_, sizeof(OpSignature) * size_);
  if (signatures_arrived_ != nullptr) cuda_->EventDestroy(signatures_arrived_);
  absl::MutexLock lock(&mu_);
  for (cudaEvent_t e : all_marks_) cuda_->EventDestroy(e);
}

void NcclBackend::Abort() {
  AbortFor(absl::CancelledError("the group was aborted"));
}

void NcclBackend::AbortFor(const absl::Status& why) {
  std::vector<NcclComm*> comms;
  {
    absl::MutexLock lock(&mu_);
    if (aborted_.ok()) aborted_ = why;
    for (auto& [key, channel] : pairs_) comms.push_back(channel->comm.get());
  }
  if (collectives_ != nullptr) collectives_->comm->Abort(why);
  // Pair channels are never removed before the destructor, so the pointers
  // stay valid after the lock.
  for (NcclComm* c : comms) c->Abort(why);
}

absl::Status NcclBackend::SetCudaStream(void* stream) {
  caller_stream_.store(stream);
  return absl::OkStatus();
}

absl::StatusOr<void*> NcclBackend::MarkIssue(Device /*device*/) {
  CudaDeviceGuard on(*cuda_, device_);
  DK_RETURN_IF_ERROR(on.status());
  cudaEvent_t mark = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (!free_marks_.empty()) {
      mark = free_marks_.back();
      free_marks_.pop_back();
    }
  }
  if (mark == nullptr) {
    DK_RETURN_IF_ERROR(CudaStatus(
        *cuda_, cuda_->EventCreateWithFlags(&mark, cudaEventDisableTiming),
        "cudaEventCreateWithFlags"));
    absl::MutexLock lock(&mu_);
    all_marks_.push_back(mark);
  }
  void* stream = caller_stream_.load();
  const cudaError_t e = cuda_->EventRecord(
      mark,
      stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamLegacy);
  if (e != cudaSuccess) {
    cuda_->GetLastError();  // not sticky
    ReleaseIssueMark(mark);
    const std::string why = absl::StrCat(
        "the caller's CUDA stream cannot be followed (is it a stream of ",
        Device::Cuda(device_).ToString(), ", this group's device?): ",
        CudaStatus(*cuda_, e, "cudaEventRecord").message());
    // A refusal on this rank alone: its peers run the operation. Aborting
    // the group's communication wakes them (they fail naming this rank)
    // instead of leaving them to the timeout; the group is unusable here.
    AbortFor(absl::FailedPreconditionError(
        absl::StrCat("this rank refused an operation and aborted the group's "
                     "communication: ",
                     why)));
    return absl::InvalidArgumentError(absl::StrCat(
        why,
        "; refused on this rank only, so the group's communication was "
        "aborted (its peers fail too): create a new group"));
  }
  return static_cast<void*>(mark);
}

void NcclBackend::ReleaseIssueMark(void* mark) {
  absl::MutexLock lock(&mu_);
  free_marks_.push_back(static_cast<cudaEvent_t>(mark));
}

absl::Status NcclBackend::AbortedStatus(const OpContext& ctx) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) return absl::OkStatus();
  return absl::Status(aborted_.code(),
                      absl::StrCat(ctx.Describe(), ": ", aborted_.message()));
}

absl::Status NcclBackend::CheckDevice(Device device) const {
  if (device == Device::Cuda(device_)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the nccl backend works on ", Device::Cuda(device_).ToString(),
      " tensors, got one on ", device.ToString()));
}

bool NcclBackend::NativeMean(DataType dtype, Device /*device*/) const {
  // Integers too (NCCL 2.10's SumPostDiv: the wrapped sum, divided toward
  // zero on the device), so no integer mean goes through host memory.
  return dtype != DataType::kBool;
}

absl::Status NcclBackend::CheckReduce(ReduceOp op, DataType dtype,
                                      Device /*device*/) const {
  if (NcclCanReduce(op, dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("the nccl backend cannot reduce ", DataTypeName(dtype),
                   " with ", ReduceOpName(op)));
}

absl::StatusOr<void*> NcclBackend::Staging(Channel& channel, size_t bytes) {
  if (channel.staging_bytes < bytes) {
    DK_ASSIGN_OR_RETURN(channel.staging,
                        DeviceBuffer::Allocate(Device::Cuda(device_), bytes));
    channel.staging_bytes = bytes;
  }
  return channel.staging.data();
}

absl::Status NcclBackend::RunCollective(const OpContext& ctx,
                                        const Enqueue& enqueue, bool grouped) {
  return Run(ctx, *collectives_, enqueue, grouped, /*agree=*/true);
}

void NcclBackend::AgreeAlongside(const OpSignature& mine) { alongside_ = mine; }

DevicePlace NcclBackend::WhereOpFailed(const OpContext& ctx) {
  absl::MutexLock lock(&mu_);
  auto it = failed_places_.find(ctx.Describe());
  if (it == failed_places_.end()) return DevicePlace::kUnknown;
  const DevicePlace place = it->second;
  failed_places_.erase(it);
  return place;
}

absl::Status NcclBackend::InitAgreement() {
  DK_RETURN_IF_ERROR(UseDevice());
  DK_ASSIGN_OR_RETURN(
      signatures_device_,
      DeviceBuffer::Allocate(Device::Cuda(device_),
                             sizeof(OpSignature) * (size_ + 1)));
  DK_ASSIGN_OR_RETURN(void* host,
                      TakePinned(*cuda_, sizeof(OpSignature) * size_));
  signatures_host_ = static_cast<OpSignature*>(host);
  return CudaStatus(
      *cuda_,
      cuda_->EventCreateWithFlags(&signatures_arrived_, cudaEventDisableTiming),
      "cudaEventCreateWithFlags");
}

absl::Status NcclBackend::CheckAlongside(const OpContext& ctx) {
  absl::Status agreed =
      CheckAgreement(ctx, absl::MakeConstSpan(signatures_host_, size_));
  if (agreed.ok()) return agreed;
  const absl::Status aborted = absl::AbortedError(absl::StrCat(
      agreed.message(),
      "; the operation had already started on every rank, so the group's "
      "NCCL communicator was aborted"));
  collectives_->comm->Abort(aborted);
  return aborted;
}

absl::Status NcclBackend::Run(const OpContext& ctx, Channel& channel,
                              const Enqueue& enqueue, bool grouped,
                              bool agree) {
  // This rank's signature, handed over by the contract for this operation.
  std::optional<OpSignature> mine;
  if (agree) mine.swap(alongside_);
  // A lone rank has no peer to disagree with: its signature is not sent
  // (on a GPU the exchange was 15 of a 4-byte all_reduce's 24 us).
  if (size_ == 1) mine.reset();
  DK_RETURN_IF_ERROR(AbortedStatus(ctx));
  const absl::Time deadline = absl::Now() + ctx.timeout;
  const std::string what = absl::StrCat(ctx.Describe(), " (rank ", rank_, ")");
  auto failed = [&](const absl::Status& s) {
    return absl::Status(s.code(),
                        absl::StrCat(ctx.Describe(), ": ", s.message()));
  };
  DK_RETURN_IF_ERROR(UseDevice());
  char* signatures = static_cast<char*>(signatures_device_.data());
  if (mine) {
    // From pageable memory the copy has read the 40 bytes when it returns.
    // Queued before the wait for the caller's work: a pageable copy may
    // synchronize with its stream, which would hold this thread inside CUDA
    // (no deadline, no roll call) until the caller's earlier work ends.
    DK_RETURN_IF_ERROR(
        CudaStatus(*cuda_,
                   cuda_->MemcpyAsync(signatures, &*mine, sizeof(OpSignature),
                                      cudaMemcpyHostToDevice, channel.stream),
                   "cudaMemcpyAsync"));
  }
  // The caller's work comes first: up to the issue mark, or, for what was
  // issued without one (a barrier), all of the legacy default stream's.
  cudaEvent_t ready = static_cast<cudaEvent_t>(ctx.issue_mark);
  if (ready == nullptr) {
    ready = channel.ready;
    DK_RETURN_IF_ERROR(CudaStatus(*cuda_,
                                  cuda_->EventRecord(ready, cudaStreamLegacy),
                                  "cudaEventRecord"));
  }
  DK_RETURN_IF_ERROR(
      CudaStatus(*cuda_, cuda_->StreamWaitEvent(channel.stream, ready, 0),
                 "cudaStreamWaitEvent"));
  if (mine) {
    // Every rank's signature, then to the host, then the operation: all in
    // stream order, nothing waited for on the device. Two enqueues: a
    // non-blocking communicator may answer the all-gather with
    // ncclInProgress, and takes no further call until that is over.
    absl::Status gathered = channel.comm->Enqueue(
        [&](ncclComm_t comm) {
          return nccl_->AllGather(signatures, signatures + sizeof(OpSignature),
                                  sizeof(OpSignature), ncclUint8, comm,
                                  channel.stream);
        },
        deadline, what);
    if (!gathered.ok()) return failed(gathered);
    absl::Status copied = CudaStatus(
        *cuda_,
        cuda_->MemcpyAsync(signatures_host_, signatures + sizeof(OpSignature),
                           sizeof(OpSignature) * size_, cudaMemcpyDeviceToHost,
                           channel.stream),
        "cudaMemcpyAsync");
    if (copied.ok()) {
      copied = CudaStatus(
          *cuda_, cuda_->EventRecord(signatures_arrived_, channel.stream),
          "cudaEventRecord");
    }
    if (!copied.ok()) {
      channel.comm->Abort(copied);
      return failed(copied);
    }
  }
  absl::Status s = channel.comm->Enqueue(
      [&](ncclComm_t comm) {
        if (!grouped) return enqueue(comm, channel.stream);
        const ncclResult_t start = nccl_->GroupStart();
        if (start != ncclSuccess) return start;
        const ncclResult_t r = enqueue(comm, channel.stream);
        const ncclResult_t end = nccl_->GroupEnd();
        return r != ncclSuccess ? r : end;
      },
      deadline, what);
  if (!s.ok()) return failed(s);
  // A failed record would make the operation look complete before it ran.
  if (absl::Status r =
          CudaStatus(*cuda_, cuda_->EventRecord(channel.done, channel.stream),
                     "cudaEventRecord");
      !r.ok()) {
    channel.comm->Abort(r);
    return failed(r);
  }
  // Waits for the end; a failure there has aborted the communicator, whose
  // kernels then exit, and the stream is drained before returning, so that
  // nothing queued still touches the buffers when the caller reuses or frees
  // them (DeviceBuffer's cache hands memory out again at once).
  bool looked = false;  // WhereOnDevice at the deadline
  auto wait_for_end = [&]() -> absl::Status {
    bool agreed = !mine;
    absl::Time next_health = absl::Now() + kHealthPeriod;
    for (int spins = 0;; ++spins) {
      // The signatures arrive before the operation's kernels run: a mismatch
      // ends the operation at once, also one that would hang.
      if (!agreed) {
        const cudaError_t e = cuda_->EventQuery(signatures_arrived_);
        if (e == cudaSuccess) {
          agreed = true;
          DK_RETURN_IF_ERROR(CheckAlongside(ctx));
        } else if (e != cudaErrorNotReady) {
          const absl::Status r = CudaStatus(*cuda_, e, "cudaEventQuery");
          channel.comm->Abort(r);
          return failed(r);
        }
      }
      const cudaError_t e = cuda_->EventQuery(channel.done);
      if (e == cudaSuccess && agreed) {
        // Done may also mean ended by an abort (NCCL's kernels exit): only an
        // operation of a communicator still healthy succeeded.
        DK_RETURN_IF_ERROR(AbortedStatus(ctx));
        if (absl::Status h = channel.comm->Health(what); !h.ok()) {
          return failed(h);
        }
        return absl::OkStatus();
      }
      if (e != cudaSuccess && e != cudaErrorNotReady) {
        const absl::Status r = CudaStatus(*cuda_, e, "cudaEventQuery");
        channel.comm->Abort(r);
        return failed(r);
      }
      if (e == cudaSuccess) continue;  // the signatures' event next turn
      const absl::Time now = absl::Now();
      if (now > deadline) {
        looked = true;
        const DevicePlace place = WhereOnDevice(ctx, ready);
        channel.comm->Abort(absl::DeadlineExceededError(absl::StrCat(
            what, ": timed out after ", absl::FormatDuration(ctx.timeout),
            place == DevicePlace::kNotStarted ? "; this rank's device had not "
                                                "started it"
            : place == DevicePlace::kInside
                ? "; this rank's device was inside it"
                : "")));
        return failed(channel.comm->failure());
      }
      if (now > next_health) {
        next_health = now + kHealthPeriod;
        if (absl::Status h = channel.comm->Health(what); !h.ok()) {
          return failed(h);
        }
      }
      // Short operations finish within microseconds: spin first, then sleep.
      if (spins > 64) absl::SleepFor(absl::Microseconds(20));
    }
  };
  absl::Status ended = wait_for_end();
  if (!ended.ok()) {
    // Also when a peer's abort ended it first.
    if (!looked) WhereOnDevice(ctx, ready);
    channel.comm->Abort(ended);  // already, unless the group was aborted
    // Nothing queued may touch the buffers once this returns (the roll call
    // heard where this rank was already: a late device may take long).
    cuda_->StreamSynchronize(channel.stream);
  }
  return ended;
}

DevicePlace NcclBackend::WhereOnDevice(const OpContext& ctx,
                                       cudaEvent_t ready) {
  // Whether the caller's work before the operation had finished on the
  // device (the event its stream waited for): if not, this rank is the late
  // one, though its host reached the operation in time.
  const cudaError_t started = cuda_->EventQuery(ready);
  const DevicePlace place = started == cudaSuccess ? DevicePlace::kInside
                            : started == cudaErrorNotReady
                                ? DevicePlace::kNotStarted
                                : DevicePlace::kUnknown;
  {
    absl::MutexLock lock(&mu_);
    // Kept until asked; a group whose failures are never asked about (no
    // diagnosis) keeps a few at most.
    if (failed_places_.size() >= 64) failed_places_.clear();
    failed_places_[ctx.Describe()] = place;
  }
  if (ctx.answer_roll_call != nullptr && place != DevicePlace::kUnknown) {
    ctx.answer_roll_call(ctx.roll_call_group, ctx, place);
  }
  return place;
}

absl::StatusOr<NcclBackend::Channel*> NcclBackend::PairChannel(
    const OpContext& ctx, int from, int to) {
  const std::pair<int, int> key(from, to);
  {
    absl::MutexLock lock(&mu_);
    auto it = pairs_.find(key);
    if (it != pairs_.end()) return it->second.get();
  }
  // Only this thread (the lane for this direction) makes this channel, so
  // it is made outside the lock: the other lanes keep going meanwhile, and
  // the peer may be making ours while we wait for its id.
  const std::string id_key = absl::StrCat("pair/", from, "-", to);
  ncclUniqueId id;
  if (rank_ == from) {
    DK_RETURN_IF_ERROR(UseDevice());
    DK_RETURN_IF_ERROR(
        NcclStatus(*nccl_, nccl_->GetUniqueId(&id), "ncclGetUniqueId"));
    DK_RETURN_IF_ERROR(store_->Set(
        id_key, absl::string_view(id.internal, sizeof(id.internal))));
  } else {
    // In slices, so that an Abort() meanwhile ends the wait (the peer may
    // never come).
    const absl::Time deadline = absl::Now() + ctx.timeout;
    absl::StatusOr<std::string> got;
    do {
      DK_RETURN_IF_ERROR(AbortedStatus(ctx));
      got = store_->Get(
          id_key, std::min(absl::Milliseconds(200), deadline - absl::Now()));
    } while (absl::IsDeadlineExceeded(got.status()) && absl::Now() < deadline);
    DK_RETURN_IF_ERROR(got.status());
    const std::string& bytes = *got;
    if (bytes.size() != sizeof(id.internal)) {
      return absl::DataLossError("nccl: malformed ncclUniqueId in the store");
    }
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  DK_ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> comm,
                      NcclComm::Init(
                          cuda_, nccl_, device_, 2, id, rank_ == from ? 0 : 1,
                          absl::Now() + ctx.timeout,
                          [this] {
                            absl::MutexLock lock(&mu_);
                            return !aborted_.ok();
                          },
                          absl::StrCat(name_, ", sends ", from, " -> ", to)));
  DK_ASSIGN_OR_RETURN(std::unique_ptr<Channel> channel,
                      MakeChannel(std::move(comm)));
  absl::MutexLock lock(&mu_);
  // An Abort() while it was being made reaches it here.
  if (!aborted_.ok()) channel->comm->Abort(aborted_);
  Channel* raw = channel.get();
  pairs_[key] = std::move(channel);
  return raw;
}

absl::StatusOr<std::unique_ptr<Backend>> NcclBackend::Split(
    const OpContext& ctx, const std::vector<int>& parent_ranks) {
  DK_RETURN_IF_ERROR(AbortedStatus(ctx));
  int key = -1;
  for (size_t i = 0; i < parent_ranks.size(); ++i)
    if (parent_ranks[i] == rank_) key = static_cast<int>(i);
  const int size = static_cast<int>(parent_ranks.size());
  DK_RETURN_IF_ERROR(UseDevice());
  absl::StatusOr<std::unique_ptr<NcclComm>> comm = collectives_->comm->Split(
      key >= 0, std::max(key, 0), absl::Now() + ctx.timeout,
      absl::StrCat("rank ", key, " of ", size));
  if (!comm.ok()) {
    return absl::Status(
        comm.status().code(),
        absl::StrCat(ctx.Describe(), ": ", comm.status().message()));
  }
  if (key < 0) return std::unique_ptr<Backend>();
  // The subgroup's pairs meet under a prefix only its members share: the
  // split's sequence number is the same on every rank of this group.
  std::unique_ptr<NcclBackend> b(new NcclBackend(
      cuda_, nccl_,
      std::make_shared<PrefixStore>(absl::StrCat("split", ctx.seq), store_),
      key, size, device_));
  DK_ASSIGN_OR_RETURN(b->collectives_, b->MakeChannel(*std::move(comm)));
  DK_RETURN_IF_ERROR(b->InitAgreement());
  return std::unique_ptr<Backend>(std::move(b));
}

// ---- The contract's metadata ---------------------------------------------

absl::Status NcclBackend::AllGatherHost(const OpContext& ctx, const void* in,
                                        size_t bytes, void* out) {
  // Staged through the channel's device memory, in stream order: one copy
  // in, one ncclAllGather, one copy out once the event says it is done.
  DK_RETURN_IF_ERROR(UseDevice());
  Channel& c = *collectives_;
  DK_ASSIGN_OR_RETURN(void* staging, Staging(c, bytes * (size_ + 1)));
  char* mine = static_cast<char*>(staging);
  char* all = mine + bytes;
  DK_RETURN_IF_ERROR(CudaStatus(
      *cuda_,
      cuda_->MemcpyAsync(mine, in, bytes, cudaMemcpyHostToDevice, c.stream),
      "cudaMemcpyAsync"));
  DK_RETURN_IF_ERROR(Run(ctx, c, [&](ncclComm_t comm, cudaStream_t stream) {
    return nccl_->AllGather(mine, all, bytes, ncclUint8, comm, stream);
  }));
  return CudaStatus(
      *cuda_, cuda_->Memcpy(out, all, bytes * size_, cudaMemcpyDeviceToHost),
      "cudaMemcpy");
}

// ---- Collectives ---------------------------------------------------------

absl::Status NcclBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                    ReduceOp op) {
  return RunCollective(ctx, [&](ncclComm_t comm, cudaStream_t stream) {
    return nccl_->AllReduce(data.data(), data.data(), data.numel(),
                            NcclType(data.dtype()), NcclOp(op, data.dtype()),
                            comm, stream);
  });
}

absl::Status NcclBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                    int root) {
  return RunCollective(ctx, [&](ncclComm_t comm, cudaStream_t stream) {
    return nccl_->Broadcast(data.data(), data.data(), data.numel(),
                            NcclType(data.dtype()), root, comm, stream);
  });
}

absl::Status NcclBackend::Reduce(const OpContext& ctx, TensorRef data,
                                 ReduceOp op, int root) {
  return RunCollective(ctx, [&](ncclComm_t comm, cudaStream_t stream) {
    return nccl_->Reduce(data.data(), data.data(), data.numel(),
                         NcclType(data.dtype()), NcclOp(op, data.dtype()), root,
                         comm, stream);
  });
}

absl::Status NcclBackend::AllGather(const OpContext& ctx, TensorRef input,
                                    TensorRef output) {
  return RunCollective(ctx, [&](ncclComm_t comm, cudaStream_t stream) {
    return nccl_->AllGather(input.data(), output.data(), input.numel(),
                            NcclType(input.dtype()), comm, stream);
  });
}

namespace {

// A device-to-device copy inside an enqueue: a CUDA failure reads as NCCL's
// "unhandled CUDA error", which aborts the communicator like any other.
ncclResult_t CopyInStream(const CudaLibrary& cuda, void* dst, const void* src,
                          size_t n, cudaStream_t stream) {
  return cuda.MemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream) ==
                 cudaSuccess
             ? ncclSuccess
             : ncclUnhandledCudaError;
}

}  // namespace

absl::Status NcclBackend::Gather(const OpContext& ctx, TensorRef input,
                                 TensorRef output, int root) {
  // Grouped sends to the root; the root receives every part.
  return RunCollective(
      ctx,
      [&](ncclComm_t comm, cudaStream_t stream) -> ncclResult_t {
        const ncclDataType_t t = NcclType(input.dtype());
        if (rank_ != root) {
          return nccl_->Send(input.data(), input.numel(), t, root, comm,
                             stream);
        }
        for (int r = 0; r < size_; ++r) {
          char* dst = At(output, r * input.numel());
          const ncclResult_t res =
              r == rank_ ? CopyInStream(*cuda_, dst, input.data(),
                                        input.nbytes(), stream)
                         : nccl_->Recv(dst, input.numel(), t, r, comm, stream);
          if (res != ncclSuccess) return res;
        }
        return ncclSuccess;
      },
      /*grouped=*/true);
}

absl::Status NcclBackend::Scatter(const OpContext& ctx, TensorRef input,
                                  TensorRef output, int root) {
  return RunCollective(
      ctx,
      [&](ncclComm_t comm, cudaStream_t stream) -> ncclResult_t {
        const ncclDataType_t t = NcclType(output.dtype());
        if (rank_ != root) {
          return nccl_->Recv(output.data(), output.numel(), t, root, comm,
                             stream);
        }
        for (int r = 0; r < size_; ++r) {
          const char* src = At(input, r * output.numel());
          const ncclResult_t res =
              r == rank_ ? CopyInStream(*cuda_, output.data(), src,
                                        output.nbytes(), stream)
                         : nccl_->Send(src, output.numel(), t, r, comm, stream);
          if (res != ncclSuccess) return res;
        }
        return ncclSuccess;
      },
      /*grouped=*/true);
}

absl::Status NcclBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                        TensorRef output, ReduceOp op) {
  return RunCollective(ctx, [&](ncclComm_t comm, cudaStream_t stream) {
    return nccl_->ReduceScatter(input.data(), output.data(), output.numel(),
                                NcclType(output.dtype()),
                                NcclOp(op, output.dtype()), comm, stream);
  });
}

absl::Status NcclBackend::AllToAll(const OpContext& ctx, TensorRef input,
                                   absl::Span<const int64_t> input_splits,
                                   TensorRef output,
                                   absl::Span<const int64_t> output_splits) {
  std::vector<int64_t> in(size_), out(size_);
  for (int r = 0; r < size_; ++r) {
    in[r] = input_splits.empty() ? input.numel() / size_ : input_splits[r];
    out[r] = output_splits.empty() ? output.numel() / size_ : output_splits[r];
  }
  return RunCollective(
      ctx,
      [&](ncclComm_t comm, cudaStream_t stream) -> ncclResult_t {
        const ncclDataType_t t = NcclType(input.dtype());
        int64_t sat = 0, rat = 0;
        for (int r = 0; r < size_; ++r) {
          ncclResult_t res =
              nccl_->Send(At(input, sat), in[r], t, r, comm, stream);
          if (res != ncclSuccess) return res;
          res = nccl_->Recv(At(output, rat), out[r], t, r, comm, stream);
          if (res != ncclSuccess) return res;
          sat += in[r];
          rat += out[r];
        }
        return ncclSuccess;
      },
      /*grouped=*/true);
}

// ---- Point to point ------------------------------------------------------

// NCCL has no tags: messages between a pair arrive in order, which keeps the
// contract's header ahead of its data. Host buffers (the header) are staged
// through the pair channel's device memory.
absl::Status NcclBackend::Send(const OpContext& ctx, TensorRef data, int dst,
                               int /*tag*/) {
  DK_RETURN_IF_ERROR(AbortedStatus(ctx));
  DK_RETURN_IF_ERROR(UseDevice());
  DK_ASSIGN_OR_RETURN(Channel * c, PairChannel(ctx, rank_, dst));
  const void* bytes = data.data();
  if (data.device().is_cpu() && data.nbytes() > 0) {
    DK_ASSIGN_OR_RETURN(void* staging, Staging(*c, data.nbytes()));
    // From pageable memory the copy has read the bytes when it returns.
    DK_RETURN_IF_ERROR(
        CudaStatus(*cuda_,
                   cuda_->MemcpyAsync(staging, data.data(), data.nbytes(),
                                      cudaMemcpyHostToDevice, c->stream),
                   "cudaMemcpyAsync"));
    bytes = staging;
  }
  return Run(ctx, *c, [&](ncclComm_t comm, cudaStream_t stream) {
    return nccl_->Send(bytes, data.nbytes(), ncclUint8, /*peer=*/1, comm,
                       stream);
  });
}

absl::Status NcclBackend::Recv(const OpContext& ctx, TensorRef data, int src,
                               int /*tag*/) {
  DK_RETURN_IF_ERROR(AbortedStatus(ctx));
  DK_RETURN_IF_ERROR(UseDevice());
  DK_ASSIGN_OR_RETURN(Channel * c, PairChannel(ctx, src, rank_));
  const bool staged = data.device().is_cpu() && data.nbytes() > 0;
  void* bytes = data.data();
  if (staged) {
    DK_ASSIGN_OR_RETURN(bytes, Staging(*c, data.nbytes()));
  }
  DK_RETURN_IF_ERROR(Run(ctx, *c, [&](ncclComm_t comm, cudaStream_t stream) {
    return nccl_->Recv(bytes, data.nbytes(), ncclUint8, /*peer=*/0, comm,
                       stream);
  }));
  if (!staged) return absl::OkStatus();
  return CudaStatus(
      *cuda_,
      cuda_->Memcpy(data.data(), bytes, data.nbytes(), cudaMemcpyDeviceToHost),
      "cudaMemcpy");
}

}  // namespace distkit
