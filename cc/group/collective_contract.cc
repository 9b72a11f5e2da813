#include "cc/group/collective_contract.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/comm/op_signature.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/core/data_type.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/group/flight_recorder.h"

namespace distkit {
namespace {

// Sent before every point-to-point message: what the receiver must expect.
struct P2PHeader {
  int32_t dtype;
  int32_t tag;
  int64_t count;
};
static_assert(sizeof(P2PHeader) == 16, "P2PHeader travels as bytes");

TensorRef HostBytes(void* data, size_t bytes) {
  return TensorRef(data, static_cast<int64_t>(bytes), DataType::kUInt8);
}

// `t`'s bytes as this rank's inline payload, when they are in host memory;
// `output` (default: `t`) is where the operation leaves its result.
InlinePayload Payload(const TensorRef& t, size_t op_bytes, bool contributes,
                      const TensorRef* output = nullptr) {
  InlinePayload p;
  p.bytes = op_bytes;
  if (contributes && t.device().is_cpu()) p.data = t.data();
  const TensorRef& out = output != nullptr ? *output : t;
  if (out.device().is_cpu()) p.output = out.data();
  return p;
}

// An output the operation writes into a separate buffer on its device when
// `stage` (it overlaps an input the peers still read, in a form the
// backends do not take), copied over by Finish. Each rank decides alone: it
// changes only where this rank's result lands. On a CUDA device the buffer
// comes from the block cache and the copy is the device's own (the backend
// has waited for the operation's end, so the buffer is whole).
class StagedOutput {
 public:
  static absl::StatusOr<StagedOutput> For(const TensorRef& output, bool stage) {
    StagedOutput staged(output);
    if (stage && output.nbytes() > 0) {
      DK_ASSIGN_OR_RETURN(
          staged.buffer_,
          DeviceBuffer::Allocate(output.device(), output.nbytes()));
      staged.result_ = output.At(staged.buffer_.data(), output.device());
    }
    return staged;
  }
  // Where the operation writes.
  const TensorRef& result() const { return result_; }
  absl::Status Finish() {
    if (buffer_.data() == nullptr) return absl::OkStatus();
    return CopyBytes(output_.data(), output_.device(), buffer_.data(),
                     output_.device(), output_.nbytes());
  }

 private:
  explicit StagedOutput(const TensorRef& output)
      : output_(output), result_(output) {}
  TensorRef output_;
  TensorRef result_;
  DeviceBuffer buffer_;
};

// Whether `part` is `whole`'s part `index` (parts of part's size): the
// in-place form of the operations that take one.
bool IsPart(const TensorRef& part, const TensorRef& whole, int index) {
  return part.data() ==
         static_cast<const char*>(whole.data()) + index * part.nbytes();
}

// An even all_to_all's payload: the whole input, of which each peer needs
// its part.
InlinePayload SpreadPayload(const TensorRef& input, const TensorRef& output) {
  InlinePayload p = Payload(input, input.nbytes(), true, &output);
  p.spread = true;
  return p;
}

// A host bool buffer the operation wrote, as 0 or 1 (any other byte is
// true): what a peer sent is copied as it came, and a C caller may send any
// byte, which a Rust, C++ or Go bool on this rank must never hold. One read
// pass finds whether any byte needs it; other dtypes and device memory (no
// host pass over it) are left alone.
void NormalizeBools(const TensorRef& t) {
  if (t.dtype() != DataType::kBool || !t.device().is_cpu()) return;
  uint8_t* bytes = static_cast<uint8_t*>(t.data());
  const size_t n = t.nbytes();
  uint8_t seen = 0;
  for (size_t i = 0; i < n; ++i) seen |= bytes[i];
  if ((seen & 0xfe) == 0) return;
  for (size_t i = 0; i < n; ++i) bytes[i] = bytes[i] != 0 ? 1 : 0;
}

// `status`, with `t` normalised (NormalizeBools) once the operation is done.
absl::Status BoolsNormalized(absl::Status status, const TensorRef& t) {
  if (status.ok()) NormalizeBools(t);
  return status;
}

}  // namespace

CollectiveContract::CollectiveContract(std::unique_ptr<Backend> backend,
                                       bool skip_agreement)
    : backend_(std::move(backend)),
      signatures_(backend_->size()),
      skip_agreement_(skip_agreement) {}

absl::Status CollectiveContract::CheckDevice(Device device) const {
  return backend_->CheckDevice(device);
}

absl::Status CollectiveContract::CheckReduce(ReduceOp op,
                                             const TensorRef& t) const {
  DK_RETURN_IF_ERROR(CheckReduceOpSupported(op, t.dtype()));
  return backend_->CheckReduce(op, t.dtype(), t.device());
}

// ---- Poison and abort -------------------------------------------------------

absl::Status CollectiveContract::Usable(const OpContext& ctx) const {
  if (!poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
  LightMutexLock lock(&mu_);
  if (poison_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(ctx.Describe(), " (rank ", backend_->rank(),
                   "): the group is unusable after an earlier error (",
                   poison_.message(), "); abort it and create a new group"));
}

absl::Status CollectiveContract::Record(absl::Status status) {
  // Which statuses poison: cc/comm/backend.h (PoisonsGroup).
  if (PoisonsGroup(status)) {
    LightMutexLock lock(&mu_);
    if (poison_.ok()) {
      poison_ = status;
      poisoned_.store(true, std::memory_order_release);
    }
  }
  return status;
}

void CollectiveContract::Abort(absl::string_view group_name) {
  {
    LightMutexLock lock(&mu_);
    if (poison_.ok()) {
      poison_ = absl::CancelledError(
          absl::StrCat("group '", group_name, "' was aborted"));
      poisoned_.store(true, std::memory_order_release);
    }
  }
  backend_->Abort();
}

absl::Status CollectiveContract::AsyncError() const {
  if (!poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
  LightMutexLock lock(&mu_);
  return poison_;
}

// ---- Agreement, mean, splits ------------------------------------------------

absl::Status CollectiveContract::Agree(const OpContext& ctx,
                                       const OpSignature& mine,
                                       InlinePayload payload,
                                       bool data_follows) {
  if (ctx.recorder != nullptr) {
    ctx.recorder->Describe(ctx.record_id, mine);
  }
  // Measurement only: the exchange that carries nothing the operation uses.
  if (skip_agreement_ && data_follows &&
      backend_->AgreementSkippable(static_cast<OpCode>(mine.op),
                                   payload.bytes)) {
    return absl::OkStatus();
  }
  if (data_follows && backend_->AgreesAlongside()) {
    backend_->AgreeAlongside(mine);
    return absl::OkStatus();
  }
  DK_RETURN_IF_ERROR(backend_->ExchangeSignatures(ctx, mine, payload,
                                                  absl::MakeSpan(signatures_)));
  exchanged_seq_.store(ctx.seq, std::memory_order_relaxed);
  absl::Status agreed = CheckAgreement(ctx, signatures_);
  if (agreed.ok() || !backend_->AgreesAlongside()) return agreed;
  // A backend that agrees alongside its operations: a peer that called a
  // data operation met this exchange with its alongside signature and has
  // aborted; so do we, so that every rank ends the same way.
  backend_->Abort();
  return absl::AbortedError(absl::StrCat(
      agreed.message(), "; the group's communication was aborted"));
}

ReduceOp CollectiveContract::WireOp(ReduceOp op, const TensorRef& t) const {
  if (op == ReduceOp::kMean && !backend_->NativeMean(t.dtype(), t.device())) {
    return ReduceOp::kSum;
  }
  return op;
}

absl::Status CollectiveContract::FinishMean(ReduceOp op, TensorRef t) const {
  if (op != ReduceOp::kMean || backend_->NativeMean(t.dtype(), t.device()) ||
      t.numel() == 0) {
    return absl::OkStatus();
  }
  const int n = backend_->size();
  if (t.device().is_cpu()) {
    DivideBySize(t.data(), t.dtype(), t.numel(), n);
    return absl::OkStatus();
  }
  // A device tensor on a backend without a native mean for its dtype (NCCL
  // has one for every dtype): divide through host memory, truncating toward
  // zero like every other backend.
  std::vector<char> host(t.nbytes());
  DK_RETURN_IF_ERROR(
      CopyBytes(host.data(), Device::Cpu(), t.data(), t.device(), t.nbytes()));
  DivideBySize(host.data(), t.dtype(), t.numel(), n);
  return CopyBytes(t.data(), t.device(), host.data(), Device::Cpu(),
                   t.nbytes());
}

absl::Status CollectiveContract::CheckSplitMatrix(
    const OpContext& ctx, absl::Span<const int64_t> input_splits,
    absl::Span<const int64_t> output_splits) {
  // What rank r sends to d must be what d expects from r.
  const int n = backend_->size();
  std::vector<int64_t> mine(2 * n), all(2 * n * n);
  for (int r = 0; r < n; ++r) {
    mine[r] = input_splits[r];
    mine[n + r] = output_splits[r];
  }
  DK_RETURN_IF_ERROR(backend_->AllGatherHost(
      ctx, mine.data(), mine.size() * sizeof(int64_t), all.data()));
  for (int src = 0; src < n; ++src) {
    for (int dst = 0; dst < n; ++dst) {
      const int64_t sends = all[src * 2 * n + dst];
      const int64_t expects = all[dst * 2 * n + n + src];
      if (sends != expects) {
        return absl::InvalidArgumentError(absl::StrCat(
            ctx.Describe(), ": rank ", src, " sends ", sends,
            " elements to rank ", dst, ", which expects ", expects,
            " from it (input_splits and output_splits must match across "
            "ranks)"));
      }
    }
  }
  // Every rank's counts and offsets against the backend's bound, decided
  // from the matrix every rank holds, so every rank refuses alike.
  const int64_t most = backend_->MaxAllToAllElements();
  for (int r = 0; r < n; ++r) {
    for (int half = 0; half < 2; ++half) {
      int64_t offset = 0;
      for (int q = 0; q < n; ++q) {
        const int64_t count = all[r * 2 * n + half * n + q];
        if (count > most || offset > most) {
          return absl::InvalidArgumentError(absl::StrCat(
              ctx.Describe(), ": rank ", r, "'s ",
              half == 0 ? "input_splits" : "output_splits", " reach past ",
              most, " elements (", count, " at offset ", offset, " for rank ",
              q, "), more than the ", backend_->name(),
              " backend takes in one all_to_all"));
        }
        offset += count;
      }
    }
  }
  return absl::OkStatus();
}

OpSignature CollectiveContract::Sign(const OpContext& ctx, OpCode op,
                                     const TensorRef* t, int64_t count,
                                     int root, int reduce_op) const {
  OpSignature sig = MakeSignature(ctx, op, t, count, root, reduce_op);
  if (t != nullptr) sig.path = backend_->PathFor(t->device());
  return sig;
}

// ---- Operations -------------------------------------------------------------

absl::Status CollectiveContract::AllReduce(const OpContext& ctx, TensorRef data,
                                           ReduceOp op) {
  DK_RETURN_IF_ERROR(Agree(ctx,
                           Sign(ctx, OpCode::kAllReduce, &data, data.numel(),
                                -1, static_cast<int>(op)),
                           Payload(data, data.nbytes(), true)));
  DK_RETURN_IF_ERROR(backend_->AllReduce(ctx, data, WireOp(op, data)));
  return BoolsNormalized(FinishMean(op, data), data);
}

absl::Status CollectiveContract::Broadcast(const OpContext& ctx, TensorRef data,
                                           int root) {
  DK_RETURN_IF_ERROR(
      Agree(ctx, Sign(ctx, OpCode::kBroadcast, &data, data.numel(), root),
            Payload(data, data.nbytes(), backend_->rank() == root)));
  // The root's too, so every rank ends with the same bytes.
  return BoolsNormalized(backend_->Broadcast(ctx, data, root), data);
}

absl::Status CollectiveContract::Reduce(const OpContext& ctx, TensorRef data,
                                        ReduceOp op, int root) {
  DK_RETURN_IF_ERROR(Agree(ctx,
                           Sign(ctx, OpCode::kReduce, &data, data.numel(), root,
                                static_cast<int>(op)),
                           Payload(data, data.nbytes(), true)));
  DK_RETURN_IF_ERROR(backend_->Reduce(ctx, data, WireOp(op, data), root));
  // Every rank's: a backend may work in place on a non-root's data too.
  if (backend_->rank() != root) return BoolsNormalized(absl::OkStatus(), data);
  return BoolsNormalized(FinishMean(op, data), data);
}

absl::Status CollectiveContract::AllGather(const OpContext& ctx,
                                           TensorRef input, TensorRef output) {
  // An input inside the output anywhere but at this rank's own part (the
  // in-place form) would be overwritten by the peers' parts while it is
  // still being sent: gather into a separate output (every backend then
  // sees the same forms).
  DK_ASSIGN_OR_RETURN(
      StagedOutput staged,
      StagedOutput::For(output, input.Overlaps(output) &&
                                    !IsPart(input, output, backend_->rank())));
  const TensorRef& result = staged.result();
  DK_RETURN_IF_ERROR(Agree(ctx,
                           Sign(ctx, OpCode::kAllGather, &input, input.numel()),
                           Payload(input, input.nbytes(), true, &result)));
  DK_RETURN_IF_ERROR(backend_->AllGather(ctx, input, result));
  return BoolsNormalized(staged.Finish(), output);
}

absl::Status CollectiveContract::Gather(const OpContext& ctx, TensorRef input,
                                        TensorRef output, int root) {
  // At the root, an input inside the output anywhere but at the root's own
  // part (the in-place form) could be overwritten by a peer's part before it
  // is copied to its own: gather into a separate output, as AllGather does.
  DK_ASSIGN_OR_RETURN(
      StagedOutput staged,
      StagedOutput::For(output, backend_->rank() == root &&
                                    input.Overlaps(output) &&
                                    !IsPart(input, output, root)));
  const TensorRef& result = staged.result();
  DK_RETURN_IF_ERROR(
      Agree(ctx, Sign(ctx, OpCode::kGather, &input, input.numel(), root),
            Payload(input, input.nbytes(), true, &result)));
  DK_RETURN_IF_ERROR(backend_->Gather(ctx, input, result, root));
  if (backend_->rank() != root) return staged.Finish();
  return BoolsNormalized(staged.Finish(), output);
}

absl::Status CollectiveContract::Scatter(const OpContext& ctx, TensorRef input,
                                         TensorRef output, int root) {
  // At the root, an output inside the input anywhere but at the root's own
  // part (the in-place form) would be written while the peers still read the
  // input: scatter into a separate buffer, then copy it over.
  DK_ASSIGN_OR_RETURN(
      StagedOutput staged,
      StagedOutput::For(output, backend_->rank() == root &&
                                    output.Overlaps(input) &&
                                    !IsPart(output, input, root)));
  const TensorRef& result = staged.result();
  // The root's whole input is the payload.
  DK_RETURN_IF_ERROR(
      Agree(ctx, Sign(ctx, OpCode::kScatter, &result, result.numel(), root),
            Payload(input, result.nbytes() * backend_->size(),
                    backend_->rank() == root, &result)));
  DK_RETURN_IF_ERROR(backend_->Scatter(ctx, input, result, root));
  return BoolsNormalized(staged.Finish(), output);
}

absl::Status CollectiveContract::ReduceScatter(const OpContext& ctx,
                                               TensorRef input,
                                               TensorRef output, ReduceOp op) {
  // An output inside the input would be written while the peers still read
  // the input: reduce into a separate buffer, then copy it over. On a CUDA
  // device NCCL's in-place form (this rank's part) is its own.
  DK_ASSIGN_OR_RETURN(
      StagedOutput staged,
      StagedOutput::For(output,
                        output.Overlaps(input) &&
                            (!output.device().is_cuda() ||
                             !IsPart(output, input, backend_->rank()))));
  const TensorRef& result = staged.result();
  DK_RETURN_IF_ERROR(Agree(ctx,
                           Sign(ctx, OpCode::kReduceScatter, &result,
                                result.numel(), -1, static_cast<int>(op)),
                           Payload(input, input.nbytes(), true, &result)));
  DK_RETURN_IF_ERROR(
      backend_->ReduceScatter(ctx, input, result, WireOp(op, result)));
  DK_RETURN_IF_ERROR(FinishMean(op, result));
  return BoolsNormalized(staged.Finish(), output);
}

absl::Status CollectiveContract::AllToAll(
    const OpContext& ctx, TensorRef input,
    absl::Span<const int64_t> input_splits, TensorRef output,
    absl::Span<const int64_t> output_splits) {
  const bool uneven = !input_splits.empty() || !output_splits.empty();
  // An output that overlaps the input would be written while the peers
  // still read the input: exchange into a separate buffer, then copy it
  // over (on any device: NCCL has no in-place all_to_all either).
  DK_ASSIGN_OR_RETURN(StagedOutput staged,
                      StagedOutput::For(output, output.Overlaps(input)));
  const TensorRef& result = staged.result();
  // Uneven splits are exchanged before the data moves, so the signatures
  // must agree before that exchange too. Even ones may carry every rank's
  // whole input along (each rank then takes its part from each).
  DK_RETURN_IF_ERROR(Agree(
      ctx, Sign(ctx, OpCode::kAllToAll, &input, uneven ? -1 : input.numel()),
      uneven ? InlinePayload{} : SpreadPayload(input, result),
      /*data_follows=*/!uneven));
  if (uneven) {
    DK_RETURN_IF_ERROR(CheckSplitMatrix(ctx, input_splits, output_splits));
  }
  DK_RETURN_IF_ERROR(
      backend_->AllToAll(ctx, input, input_splits, result, output_splits));
  return BoolsNormalized(staged.Finish(), output);
}

absl::Status CollectiveContract::Barrier(const OpContext& ctx) {
  // The signature exchange is an all-gather: nobody leaves before everyone
  // has entered.
  return Agree(ctx, Sign(ctx, OpCode::kBarrier, nullptr, -1), {},
               /*data_follows=*/false);
}

absl::StatusOr<std::unique_ptr<Backend>> CollectiveContract::Split(
    const OpContext& ctx, const std::vector<int>& parent_ranks) {
  DK_RETURN_IF_ERROR(Agree(ctx,
                           Sign(ctx, OpCode::kNewGroup, nullptr,
                                static_cast<int64_t>(parent_ranks.size())),
                           {}, /*data_follows=*/false));
  return backend_->Split(ctx, parent_ranks);
}

absl::StatusOr<std::unique_ptr<Backend>> CollectiveContract::CreateAmongMembers(
    const OpContext& ctx, const std::vector<int>& parent_ranks,
    absl::string_view name) {
  DK_RETURN_IF_ERROR(Usable(ctx));
  return backend_->CreateAmongMembers(ctx, parent_ranks, name);
}

absl::Status CollectiveContract::Send(const OpContext& ctx, TensorRef data,
                                      int dst, int tag) {
  P2PHeader header{static_cast<int32_t>(data.dtype()), tag, data.numel()};
  if (ctx.recorder != nullptr) {
    ctx.recorder->Describe(ctx.record_id,
                           absl::StrCat("send #", ctx.seq, " to rank ", dst,
                                        " tag ", tag, " ", data.DebugString()));
  }
  DK_RETURN_IF_ERROR(
      backend_->Send(ctx, HostBytes(&header, sizeof(header)), dst, tag));
  if (data.nbytes() == 0) return absl::OkStatus();
  return backend_->Send(ctx, data, dst, tag);
}

absl::Status CollectiveContract::Recv(const OpContext& ctx, TensorRef data,
                                      int src, int tag) {
  P2PHeader header{};
  if (ctx.recorder != nullptr) {
    ctx.recorder->Describe(ctx.record_id,
                           absl::StrCat("recv #", ctx.seq, " from rank ", src,
                                        " tag ", tag, " ", data.DebugString()));
  }
  DK_RETURN_IF_ERROR(
      backend_->Recv(ctx, HostBytes(&header, sizeof(header)), src, tag));
  absl::StatusOr<DataType> sent = DataTypeFromInt(header.dtype);
  // The tag too: a backend without tags (NCCL) carries every tag of a pair
  // in one stream, where only the header tells them apart.
  const bool matches = sent.ok() && *sent == data.dtype() &&
                       header.count == data.numel() && header.tag == tag;
  if (matches) {
    if (data.nbytes() == 0) return absl::OkStatus();
    return BoolsNormalized(backend_->Recv(ctx, data, src, tag), data);
  }
  // Receive what was sent into a buffer of its own (on the data's device),
  // so the stream stays in step, then report the mismatch.
  const size_t sent_bytes =
      sent.ok() && header.count > 0 ? header.count * ElementSize(*sent) : 0;
  if (sent_bytes > 0) {
    DK_ASSIGN_OR_RETURN(DeviceBuffer dropped,
                        DeviceBuffer::Allocate(data.device(), sent_bytes));
    DK_RETURN_IF_ERROR(backend_->Recv(
        ctx,
        TensorRef(dropped.data(), static_cast<int64_t>(sent_bytes),
                  DataType::kUInt8, data.device()),
        src, tag));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(ctx.Describe(), ": rank ", src, " sent ",
                   sent.ok() ? DataTypeName(*sent) : "?", " x", header.count,
                   " with tag ", header.tag, " but rank ", backend_->rank(),
                   " expected ", DataTypeName(data.dtype()), " x", data.numel(),
                   " with tag ", tag, "; the data was received and dropped"));
}

}  // namespace distkit
