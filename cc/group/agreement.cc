#include "cc/group/agreement.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cc/core/device_staging.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// A verdict on the wire: status code, message length, job rank.
constexpr int kHeader = 3;

void Encode(const Verdict& v, int64_t* header) {
  header[0] = static_cast<int64_t>(v.status.code());
  header[1] = v.ok() ? 0 : static_cast<int64_t>(v.status.message().size());
  header[2] = v.ok() ? -1 : v.job_rank;
}

// Host buffers through the group's comm device (NCCL takes no host memory).
absl::Status AllGatherHost(ProcessGroup& group, TensorRef in, TensorRef out) {
  return InOutOnCommDevice(in, out, group.comm_device(),
                           [&](const TensorRef& i, const TensorRef& o) {
                             return group.AllGather(i, o);
                           });
}

absl::Status BroadcastHost(ProcessGroup& group, TensorRef data, int root) {
  return OnCommDevice(
      data, group.comm_device(), Access::kReadWrite,
      [&](const TensorRef& t) { return group.Broadcast(t, root); });
}

// The verdict `root` brought, whose header every rank holds: its message
// travels from root to the others.
absl::StatusOr<Verdict> Receive(ProcessGroup& group, const Verdict& mine,
                                const int64_t* header, int root) {
  Verdict v;
  if (header[0] == 0) return v;
  std::string message(static_cast<size_t>(header[1]), '\0');
  if (group.rank() == root) message = std::string(mine.status.message());
  if (!message.empty()) {
    DK_RETURN_IF_ERROR(BroadcastHost(
        group,
        TensorRef(message.data(), static_cast<int64_t>(message.size()),
                  DataType::kUInt8),
        root));
  }
  v.status = absl::Status(static_cast<absl::StatusCode>(header[0]), message);
  v.job_rank = static_cast<int>(header[2]);
  return v;
}

}  // namespace

Verdict Verdict::Mine(const ProcessGroup& group, absl::Status status) {
  Verdict v;
  v.job_rank = status.ok() ? -1 : group.global_rank();
  v.status = std::move(status);
  return v;
}

int Verdict::RankIn(const ProcessGroup& group) const {
  const std::vector<int>& ranks = group.global_ranks();
  auto it = std::find(ranks.begin(), ranks.end(), job_rank);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

absl::StatusOr<Verdict> AgreeOnVerdict(ProcessGroup& group,
                                       const Verdict& mine) {
  const int n = group.size();
  int64_t header[kHeader];
  Encode(mine, header);
  std::vector<int64_t> headers(kHeader * n);
  DK_RETURN_IF_ERROR(
      AllGatherHost(group, TensorRef(header, kHeader, DataType::kInt64),
                    TensorRef(headers.data(), kHeader * n, DataType::kInt64)));
  for (int r = 0; r < n; ++r) {
    if (headers[kHeader * r] != 0) {
      return Receive(group, mine, &headers[kHeader * r], r);
    }
  }
  return Verdict();
}

absl::StatusOr<Verdict> AgreeOnRootVerdict(ProcessGroup& group,
                                           const Verdict& mine, int root) {
  int64_t header[kHeader];
  Encode(mine, header);
  DK_RETURN_IF_ERROR(
      BroadcastHost(group, TensorRef(header, kHeader, DataType::kInt64), root));
  return Receive(group, mine, header, root);
}

absl::StatusOr<std::optional<ValueMismatch>> FindValueMismatch(
    ProcessGroup& group, absl::Span<const int64_t> mine, int record_size) {
  if (record_size <= 0 || mine.size() % record_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("FindValueMismatch: ", mine.size(),
                     " values are not records of ", record_size));
  }
  const int n = group.size();
  int64_t count = static_cast<int64_t>(mine.size()) / record_size;
  std::vector<int64_t> counts(n);
  DK_RETURN_IF_ERROR(
      AllGatherHost(group, TensorRef(&count, 1, DataType::kInt64),
                    TensorRef(counts.data(), n, DataType::kInt64)));
  for (int r = 1; r < n; ++r) {
    if (counts[r] != counts[0]) {
      return ValueMismatch{r, -1, {counts[0]}, {counts[r]}};
    }
  }
  const int64_t size = static_cast<int64_t>(mine.size());
  if (size == 0) return std::nullopt;
  std::vector<int64_t> all(size * n);
  DK_RETURN_IF_ERROR(AllGatherHost(
      group,
      TensorRef(const_cast<int64_t*>(mine.data()), size, DataType::kInt64),
      TensorRef(all.data(), size * n, DataType::kInt64)));
  for (int64_t i = 0; i < count; ++i) {
    const auto rank0 = all.begin() + i * record_size;
    for (int r = 1; r < n; ++r) {
      const auto theirs = all.begin() + r * size + i * record_size;
      if (!std::equal(rank0, rank0 + record_size, theirs)) {
        return ValueMismatch{
            r, i, {rank0, rank0 + record_size}, {theirs, theirs + record_size}};
      }
    }
  }
  return std::nullopt;
}

}  // namespace distkit
