#include "cc/elastic/snapshot.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cc/core/data_type.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/elastic/host_collectives.h"

namespace distkit {
namespace elastic {

absl::Status Snapshot::Register(absl::string_view name, void* data,
                                int64_t bytes) {
  absl::MutexLock lock(&mu_);
  return buffers_.Register(name, data, bytes);
}

absl::Status Snapshot::Commit() {
  absl::MutexLock lock(&mu_);
  DK_ASSIGN_OR_RETURN(
      HostBuffer copy,
      AllocateHost(buffers_.layout().total_bytes(), "snapshot"));
  for (size_t i = 0; i < buffers_.data().size(); ++i) {
    const BufferLayout::Buffer& b = buffers_.layout().buffers()[i];
    if (b.bytes > 0) {
      std::memcpy(copy.get() + b.offset, buffers_.data()[i], b.bytes);
    }
  }
  // Only now, with the copy complete, does it replace the one held.
  held_ = std::move(copy);
  held_bytes_ = buffers_.layout().total_bytes();
  ++commit_;
  buffers_.Freeze();
  return absl::OkStatus();
}

void Snapshot::LoadLocked() {
  for (size_t i = 0; i < buffers_.data().size(); ++i) {
    const BufferLayout::Buffer& b = buffers_.layout().buffers()[i];
    if (b.bytes > 0) {
      std::memcpy(buffers_.data()[i], held_.get() + b.offset, b.bytes);
    }
  }
}

absl::Status Snapshot::Restore() {
  absl::MutexLock lock(&mu_);
  if (held_ == nullptr) {
    return absl::FailedPreconditionError(
        "snapshot: nothing to restore (no Commit or Sync yet)");
  }
  LoadLocked();
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Snapshot::Sync(ProcessGroup& group) {
  absl::MutexLock lock(&mu_);
  if (!group.is_member()) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot sync: this rank is not a member of group '",
                     group.name(), "'"));
  }
  buffers_.Freeze();
  const int n = group.size();
  const int me = group.rank();
  // 1. Every member's commit number and the length of its layout.
  const std::string layout = buffers_.layout().Encode();
  int64_t mine[2] = {commit_, static_cast<int64_t>(layout.size())};
  std::vector<int64_t> cards(2 * static_cast<size_t>(n));
  DK_RETURN_IF_ERROR(
      AllGatherHost(group, mine, cards.data(), 2, DataType::kInt64));
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, cards[2 * r + 1]);
  // 2. The layouts themselves, each padded to the longest, so that a
  // difference is named the same way on every member.
  std::string padded = layout;
  padded.resize(static_cast<size_t>(longest), '\0');
  std::string layouts(static_cast<size_t>(longest) * n, '\0');
  DK_RETURN_IF_ERROR(AllGatherHost(group, padded.data(), layouts.data(),
                                   longest, DataType::kUInt8));
  std::vector<BufferLayout> all;
  for (int r = 0; r < n; ++r) {
    DK_ASSIGN_OR_RETURN(BufferLayout l,
                        BufferLayout::Decode(absl::string_view(layouts).substr(
                            static_cast<size_t>(longest) * r,
                            static_cast<size_t>(cards[2 * r + 1]))));
    all.push_back(std::move(l));
  }
  for (int r = 1; r < n; ++r) {
    DK_RETURN_IF_ERROR(BufferLayout::CheckSame(all[0], 0, all[r], r));
  }
  // 3. The newest commit, from the first member holding it.
  int64_t chosen = 0;
  int source = -1;
  for (int r = 0; r < n; ++r) {
    if (cards[2 * r] > chosen) {
      chosen = cards[2 * r];
      source = r;
    }
  }
  if (source < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("snapshot sync: no member of group '", group.name(),
                     "' holds a snapshot (Commit before the first step)"));
  }
  const int64_t total = buffers_.layout().total_bytes();
  // Every receiver's copy first, agreed on, so that one that cannot
  // allocate fails every member at once rather than the broadcast.
  absl::StatusOr<HostBuffer> allocated =
      me == source ? absl::StatusOr<HostBuffer>(HostBuffer())
                   : AllocateHost(total, "snapshot");
  DK_RETURN_IF_ERROR(AgreeReady(group, allocated.status(), "snapshot sync"));
  if (me == source) {
    if (total > 0) {
      DK_RETURN_IF_ERROR(BroadcastHost(group, held_.get(), total, source));
    }
  } else {
    HostBuffer received = *std::move(allocated);
    if (total > 0) {
      DK_RETURN_IF_ERROR(BroadcastHost(group, received.get(), total, source));
    }
    // Received whole: it is this rank's snapshot now.
    held_ = std::move(received);
    held_bytes_ = total;
    commit_ = chosen;
  }
  LoadLocked();
  return chosen;
}

int64_t Snapshot::commit_number() const {
  absl::MutexLock lock(&mu_);
  return commit_;
}

int64_t Snapshot::bytes() const {
  absl::MutexLock lock(&mu_);
  return held_ == nullptr ? 0 : held_bytes_;
}

int64_t Snapshot::registered_bytes() const {
  absl::MutexLock lock(&mu_);
  return buffers_.layout().total_bytes();
}

}  // namespace elastic
}  // namespace distkit
