#include "cc/comm/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "cc/comm/shm/segment_names.h"
#include "cc/core/status.h"
#include "cc/store/gather_once.h"

namespace distkit {

size_t ShmLayout::SlotBytesFor(int size) {
  size_t bytes = kMaxSlotBytes;
  while (bytes > kMinSlotBytes && bytes * 2 * size > kSlotBudgetBytes) {
    bytes /= 2;
  }
  return bytes;
}

size_t ShmLayout::SegmentBytesFor(int size) {
  return sizeof(ShmGroupHeader) +
         size * (sizeof(ShmRankHeader) + sizeof(ShmEagerRing)) +
         size * 2 * SlotBytesFor(size);
}

absl::StatusOr<std::unique_ptr<ShmMapping>> ShmMapping::Map(
    Store& store, int rank, int size, const GroupChoices& rank0_choices,
    absl::Duration timeout) {
  const size_t bytes = ShmLayout::SegmentBytesFor(size);
  std::string name;
  int fd = -1;
  // Whatever ends this call, the name goes (the memory lives on with the
  // mappings): a creator that fails here leaves nothing in /dev/shm, and a
  // peer that fails removes what a dead creator left (segment_names.h).
  bool created = false;
  absl::Cleanup unlink_name = [&] {
    if (created) shm_unlink(name.c_str());
  };
  absl::Cleanup sweep_on_error = [&] {
    if (!created && rank != 0) RemoveOrphanSegments();
  };
  if (rank == 0) {
    RemoveOrphanSegments();  // an earlier job's, on this host
    name = NewSegmentName();
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    created = fd >= 0;
    // Reserve the pages now: a sparse segment on a small /dev/shm (64 MiB in
    // many containers) would fail later with SIGBUS instead of an error.
    if (fd < 0 || ftruncate(fd, bytes) != 0 ||
        posix_fallocate(fd, 0, bytes) != 0) {
      if (fd >= 0) close(fd);
      // No room in shared memory: every rank stays on TCP.
      DK_RETURN_IF_ERROR(store.Set("name", ""));
      return std::unique_ptr<ShmMapping>();
    }
  } else {
    DK_ASSIGN_OR_RETURN(name, store.Get("name", timeout));
    if (name.empty()) return std::unique_ptr<ShmMapping>();
    fd = shm_open(name.c_str(), O_RDWR, 0600);
  }
  void* base =
      fd < 0 ? MAP_FAILED
             : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  // Every way out but success unmaps: a gather that fails (a rank that
  // never arrives) must not keep the segment's memory alive for the life of
  // the process, once per failed attempt to make the group.
  absl::Cleanup unmap = [&] {
    if (base != MAP_FAILED) munmap(base, bytes);
  };
  if (base != MAP_FAILED) {
    ClaimLivenessRecord(&ShmLayout(base, size).header(rank)->liveness);
  }
  if (rank == 0 && base != MAP_FAILED) {
    auto* g = static_cast<ShmGroupHeader*>(base);
    g->single_copy_everywhere = rank0_choices.single_copy_everywhere;
    g->oversubscribed = rank0_choices.oversubscribed;
    g->eager = rank0_choices.eager;
  }
  // The peers map it once the name is out (rank 0 publishes it even where
  // its own mapping failed: the attach check below then says no to all).
  if (rank == 0) DK_RETURN_IF_ERROR(store.Set("name", name));
  // Every rank says whether it mapped the segment; all take the shared
  // memory path or none does (the two paths must never mix in one group).
  DK_ASSIGN_OR_RETURN(
      const std::string everyone_attached,
      GatherOnce(
          store, "attached/", "answer to whether it mapped the segment", rank,
          size, base == MAP_FAILED ? "0" : "1",
          [](const std::vector<std::string>& attached) {
            bool all = true;
            for (const std::string& a : attached) all &= a == "1";
            return std::string(all ? "1" : "0");
          },
          timeout));
  // Everyone has mapped it (or given up): the name goes, so nothing is left
  // in /dev/shm even if a rank crashes; the memory lives with the mappings.
  // Every rank unlinks (the first wins): a creator killed just before its
  // unlink leaves nothing behind either.
  if (!name.empty()) shm_unlink(name.c_str());
  std::move(unlink_name).Cancel();
  std::move(sweep_on_error).Cancel();
  // Its own mapping too (the cleanup above): a verdict left by an earlier
  // group under the same prefix must not have a rank that failed to map use
  // MAP_FAILED.
  if (everyone_attached != "1" || base == MAP_FAILED) {
    return std::unique_ptr<ShmMapping>();
  }
  std::move(unmap).Cancel();
  return std::unique_ptr<ShmMapping>(new ShmMapping(base, bytes, size));
}

ShmMapping::~ShmMapping() { munmap(base_, bytes_); }

}  // namespace distkit
