// ProcessGroup's operations: each collective and point-to-point call as an
// Op (its argument checks, the signature's code and the contract call that
// runs it), and the synchronous and asynchronous entry points that submit
// it. The group's lifetime, queues and failure handling: process_group.cc.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/group/process_group.h"

namespace distkit {

// --- argument checks shared by the sync and async forms ----------------------

namespace {

absl::Status SameDtype(const TensorRef& a, const TensorRef& b) {
  if (a.dtype() != b.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is ", DataTypeName(a.dtype()), " but output is ",
                     DataTypeName(b.dtype())));
  }
  if (a.device() != b.device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input is on ", a.device().ToString(), " but output on ",
                     b.device().ToString(), "; both must be on one device"));
  }
  return absl::OkStatus();
}

absl::Status ExpectNumel(const TensorRef& t, int64_t n,
                         absl::string_view what) {
  if (t.numel() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", t.numel(), " elements, expected ", n));
  }
  return absl::OkStatus();
}

}  // namespace

#define DK_CHECKS(...)                            \
  [&]() -> absl::Status {                         \
    for (const absl::Status& s : {__VA_ARGS__}) { \
      if (!s.ok()) return s;                      \
    }                                             \
    return absl::OkStatus();                      \
  }()

ProcessGroup::Op ProcessGroup::AllReduceOp(TensorRef data, ReduceOp op) {
  return {OpCode::kAllReduce, CheckReduce(data, op),
          [this, data, op](const OpContext& c) {
            return contract_->AllReduce(c, data, op);
          },
          -1, data.device()};
}

ProcessGroup::Op ProcessGroup::BroadcastOp(TensorRef data, int root) {
  return {OpCode::kBroadcast,
          DK_CHECKS(CheckTensor(data, "data"), CheckRank(root, "root")),
          [this, data, root](const OpContext& c) {
            return contract_->Broadcast(c, data, root);
          },
          -1, data.device()};
}

ProcessGroup::Op ProcessGroup::ReduceToRootOp(TensorRef data, ReduceOp op,
                                              int root) {
  return {OpCode::kReduce,
          DK_CHECKS(CheckReduce(data, op), CheckRank(root, "root")),
          [this, data, op, root](const OpContext& c) {
            return contract_->Reduce(c, data, op, root);
          },
          -1, data.device()};
}

ProcessGroup::Op ProcessGroup::AllGatherOp(TensorRef input, TensorRef output) {
  return {OpCode::kAllGather,
          DK_CHECKS(CheckTensor(input, "input"), CheckTensor(output, "output"),
                    SameDtype(input, output),
                    ExpectNumel(output, input.numel() * size(), "output")),
          [this, input, output](const OpContext& c) {
            return contract_->AllGather(c, input, output);
          },
          -1, input.device()};
}

ProcessGroup::Op ProcessGroup::GatherOp(TensorRef input, TensorRef output,
                                        int root) {
  absl::Status checked =
      DK_CHECKS(CheckTensor(input, "input"), CheckRank(root, "root"));
  if (checked.ok() && rank_ == root) {
    checked = DK_CHECKS(CheckTensor(output, "output"), SameDtype(input, output),
                        ExpectNumel(output, input.numel() * size(), "output"));
  }
  return {OpCode::kGather, checked,
          [this, input, output, root](const OpContext& c) {
            return contract_->Gather(c, input, output, root);
          },
          -1, input.device()};
}

ProcessGroup::Op ProcessGroup::ScatterOp(TensorRef input, TensorRef output,
                                         int root) {
  absl::Status checked =
      DK_CHECKS(CheckTensor(output, "output"), CheckRank(root, "root"));
  if (checked.ok() && rank_ == root) {
    checked = DK_CHECKS(CheckTensor(input, "input"), SameDtype(input, output),
                        ExpectNumel(input, output.numel() * size(), "input"));
  }
  return {OpCode::kScatter, checked,
          [this, input, output, root](const OpContext& c) {
            return contract_->Scatter(c, input, output, root);
          },
          -1, output.device()};
}

ProcessGroup::Op ProcessGroup::ReduceScatterOp(TensorRef input,
                                               TensorRef output, ReduceOp op) {
  return {OpCode::kReduceScatter,
          DK_CHECKS(CheckTensor(input, "input"), CheckReduce(output, op),
                    SameDtype(input, output),
                    ExpectNumel(input, output.numel() * size(), "input")),
          [this, input, output, op](const OpContext& c) {
            return contract_->ReduceScatter(c, input, output, op);
          },
          -1, input.device()};
}

ProcessGroup::Op ProcessGroup::AllToAllOp(TensorRef input, TensorRef output,
                                          std::vector<int64_t> input_splits,
                                          std::vector<int64_t> output_splits) {
  absl::Status checked =
      DK_CHECKS(CheckTensor(input, "input"), CheckTensor(output, "output"),
                SameDtype(input, output));
  const bool uneven = !input_splits.empty() || !output_splits.empty();
  if (checked.ok() && uneven) {
    if (input_splits.empty())
      input_splits.assign(size(), input.numel() / size());
    if (output_splits.empty())
      output_splits.assign(size(), output.numel() / size());
    checked = DK_CHECKS(CheckSplits(input_splits, input, "input"),
                        CheckSplits(output_splits, output, "output"));
  } else if (checked.ok() &&
             (input.numel() % size() != 0 || output.numel() != input.numel())) {
    checked = absl::InvalidArgumentError(absl::StrCat(
        "equal-split all_to_all needs input and output of the same size, "
        "divisible by "
        "the group size ",
        size(), "; got ", input.numel(), " and ", output.numel(), " elements"));
  }
  return {OpCode::kAllToAll, checked,
          [this, input, output, input_splits = std::move(input_splits),
           output_splits = std::move(output_splits)](const OpContext& c) {
            return contract_->AllToAll(c, input, input_splits, output,
                                       output_splits);
          },
          -1, input.device()};
}

absl::Status ProcessGroup::CheckSplits(const std::vector<int64_t>& splits,
                                       const TensorRef& t,
                                       absl::string_view what) const {
  if (static_cast<int>(splits.size()) != size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "_splits has ", splits.size(),
                     " entries for a group of size ", size()));
  }
  // Each split must fit in what the earlier ones left: a plain running sum
  // can wrap around int64 back to numel and pass, with byte counts that wrap.
  int64_t sum = 0;
  for (size_t i = 0; i < splits.size(); ++i) {
    const int64_t s = splits[i];
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "_splits[", i, "] is ", s, ", a negative entry"));
    }
    if (s > t.numel() - sum) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "_splits[", i, "] is ", s,
                       ": the entries up to it add up to more than ", what,
                       "'s ", t.numel(), " elements"));
    }
    sum += s;
  }
  if (sum != t.numel()) {
    return absl::InvalidArgumentError(absl::StrCat(what, "_splits add up to ",
                                                   sum, " but ", what, " has ",
                                                   t.numel(), " elements"));
  }
  return absl::OkStatus();
}

ProcessGroup::Op ProcessGroup::BarrierOp() {
  return {OpCode::kBarrier, absl::OkStatus(),
          [this](const OpContext& c) { return contract_->Barrier(c); }};
}

ProcessGroup::Op ProcessGroup::SendOp(TensorRef data, int dst, int tag) {
  absl::Status checked =
      DK_CHECKS(CheckTensor(data, "data"), CheckRank(dst, "dst"));
  if (checked.ok() && dst == rank_) {
    checked = absl::InvalidArgumentError("send: dst is this rank itself");
  }
  return {OpCode::kSend,
          checked,
          [this, data, dst, tag](const OpContext& c) {
            return contract_->Send(c, data, dst, tag);
          },
          dst,
          data.device(),
          tag};
}

ProcessGroup::Op ProcessGroup::RecvOp(TensorRef data, int src, int tag) {
  absl::Status checked =
      DK_CHECKS(CheckTensor(data, "data"), CheckRank(src, "src"));
  if (checked.ok() && src == rank_) {
    checked = absl::InvalidArgumentError("recv: src is this rank itself");
  }
  return {OpCode::kRecv,
          checked,
          [this, data, src, tag](const OpContext& c) {
            return contract_->Recv(c, data, src, tag);
          },
          src,
          data.device(),
          tag};
}

// The synchronous and asynchronous forms of each operation.

absl::Status ProcessGroup::AllReduce(TensorRef data, ReduceOp op) {
  return RunSync(AllReduceOp(data, op));
}
std::shared_ptr<Work> ProcessGroup::AllReduceAsync(TensorRef data,
                                                   ReduceOp op) {
  return Submit(AllReduceOp(data, op));
}
absl::Status ProcessGroup::Broadcast(TensorRef data, int root) {
  return RunSync(BroadcastOp(data, root));
}
std::shared_ptr<Work> ProcessGroup::BroadcastAsync(TensorRef data, int root) {
  return Submit(BroadcastOp(data, root));
}
absl::Status ProcessGroup::Reduce(TensorRef data, ReduceOp op, int root) {
  return RunSync(ReduceToRootOp(data, op, root));
}
std::shared_ptr<Work> ProcessGroup::ReduceAsync(TensorRef data, ReduceOp op,
                                                int root) {
  return Submit(ReduceToRootOp(data, op, root));
}
absl::Status ProcessGroup::AllGather(TensorRef input, TensorRef output) {
  return RunSync(AllGatherOp(input, output));
}
std::shared_ptr<Work> ProcessGroup::AllGatherAsync(TensorRef input,
                                                   TensorRef output) {
  return Submit(AllGatherOp(input, output));
}
absl::Status ProcessGroup::Gather(TensorRef input, TensorRef output, int root) {
  return RunSync(GatherOp(input, output, root));
}
std::shared_ptr<Work> ProcessGroup::GatherAsync(TensorRef input,
                                                TensorRef output, int root) {
  return Submit(GatherOp(input, output, root));
}
absl::Status ProcessGroup::Scatter(TensorRef input, TensorRef output,
                                   int root) {
  return RunSync(ScatterOp(input, output, root));
}
std::shared_ptr<Work> ProcessGroup::ScatterAsync(TensorRef input,
                                                 TensorRef output, int root) {
  return Submit(ScatterOp(input, output, root));
}
absl::Status ProcessGroup::ReduceScatter(TensorRef input, TensorRef output,
                                         ReduceOp op) {
  return RunSync(ReduceScatterOp(input, output, op));
}
std::shared_ptr<Work> ProcessGroup::ReduceScatterAsync(TensorRef input,
                                                       TensorRef output,
                                                       ReduceOp op) {
  return Submit(ReduceScatterOp(input, output, op));
}
absl::Status ProcessGroup::AllToAll(TensorRef input, TensorRef output,
                                    std::vector<int64_t> input_splits,
                                    std::vector<int64_t> output_splits) {
  return RunSync(AllToAllOp(input, output, std::move(input_splits),
                            std::move(output_splits)));
}
std::shared_ptr<Work> ProcessGroup::AllToAllAsync(
    TensorRef input, TensorRef output, std::vector<int64_t> input_splits,
    std::vector<int64_t> output_splits) {
  return Submit(AllToAllOp(input, output, std::move(input_splits),
                           std::move(output_splits)));
}
absl::Status ProcessGroup::AllGather(TensorRef input,
                                     const std::vector<TensorRef>& outputs) {
  absl::Status checked = CheckTensor(input, "input");
  if (checked.ok() && static_cast<int>(outputs.size()) != size()) {
    checked = absl::InvalidArgumentError(
        absl::StrCat("got ", outputs.size(),
                     " output tensors for a group of size ", size()));
  }
  for (size_t r = 0; checked.ok() && r < outputs.size(); ++r) {
    const std::string what = absl::StrCat("output ", r);
    checked =
        DK_CHECKS(CheckTensor(outputs[r], what), SameDtype(input, outputs[r]),
                  ExpectNumel(outputs[r], input.numel(), what));
  }
  // Gathered into one staging buffer on the input's device (device memory
  // for NCCL), then copied out per rank to each output's device.
  DeviceBuffer staging;
  if (checked.ok()) {
    absl::StatusOr<DeviceBuffer> made =
        DeviceBuffer::Allocate(input.device(), input.nbytes() * outputs.size());
    if (made.ok()) {
      staging = *std::move(made);
    } else {
      checked = made.status();
    }
  }
  TensorRef flat(staging.data(), input.numel() * size(), input.dtype(),
                 input.device());
  return RunSync({OpCode::kAllGather, checked,
                  [&](const OpContext& c) -> absl::Status {
                    DK_RETURN_IF_ERROR(contract_->AllGather(c, input, flat));
                    const char* all = static_cast<const char*>(staging.data());
                    for (size_t r = 0; r < outputs.size(); ++r) {
                      DK_RETURN_IF_ERROR(
                          CopyBytes(outputs[r].data(), outputs[r].device(),
                                    all + r * input.nbytes(), input.device(),
                                    input.nbytes()));
                    }
                    return absl::OkStatus();
                  },
                  -1, input.device()});
}

absl::Status ProcessGroup::Barrier() { return RunSync(BarrierOp()); }
std::shared_ptr<Work> ProcessGroup::BarrierAsync() {
  return Submit(BarrierOp());
}
absl::Status ProcessGroup::Send(TensorRef data, int dst, int tag) {
  return RunSync(SendOp(data, dst, tag));
}
std::shared_ptr<Work> ProcessGroup::SendAsync(TensorRef data, int dst,
                                              int tag) {
  return Submit(SendOp(data, dst, tag));
}
absl::Status ProcessGroup::Recv(TensorRef data, int src, int tag) {
  return RunSync(RecvOp(data, src, tag));
}
std::shared_ptr<Work> ProcessGroup::RecvAsync(TensorRef data, int src,
                                              int tag) {
  return Submit(RecvOp(data, src, tag));
}

#undef DK_CHECKS

}  // namespace distkit
