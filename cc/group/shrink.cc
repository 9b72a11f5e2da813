#include "cc/group/shrink.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cc/core/status.h"
#include "cc/group/recovery_backends.h"
#include "cc/store/call_deadline.h"

namespace distkit {
namespace {

// How many times this process has shrunk each group: survivors count alike,
// so the n-th shrink of a group meets under the same keys on every rank.
int NextShrink(const std::string& group) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* counts = new absl::flat_hash_map<std::string, int>();
  absl::MutexLock lock(&mu);
  return ++(*counts)[group];
}

}  // namespace

absl::StatusOr<std::shared_ptr<ProcessGroup>> ShrinkGroup(
    ProcessGroup& group, absl::Duration settle) {
  if (!group.is_member()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shrink: rank ", group.global_rank(),
                     " is not a member of group '", group.name(), "'"));
  }
  DK_RETURN_IF_ERROR(CheckRecoverableBackend(
      group.backend_name(),
      absl::StrCat("shrink: group '", group.name(), "'")));
  // Nothing may still run on the failed group (on NCCL: ncclCommAbort).
  group.Abort();
  const int n = NextShrink(group.name());
  const std::string prefix = absl::StrCat("shrink/", n, "/");
  Store& store = *group.store();
  ScopedStoreDeadline bound(absl::Now() + settle + group.timeout());
  DK_RETURN_IF_ERROR(
      store.Set(absl::StrCat(prefix, "alive/", group.rank()), "1"));

  // Wait for every member, or until the window closes.
  std::vector<int> alive;
  const absl::Time close = absl::Now() + settle;
  while (true) {
    alive.clear();
    for (int r = 0; r < group.size(); ++r) {
      DK_ASSIGN_OR_RETURN(bool here,
                          store.Check({absl::StrCat(prefix, "alive/", r)}));
      if (here) alive.push_back(r);
    }
    if (static_cast<int>(alive.size()) == group.size() || absl::Now() >= close)
      break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  // The first proposal to land is everyone's membership.
  DK_ASSIGN_OR_RETURN(std::string sealed,
                      store.CompareSet(absl::StrCat(prefix, "members"), "",
                                       absl::StrJoin(alive, ",")));
  std::vector<int> members;
  for (absl::string_view part : absl::StrSplit(sealed, ',')) {
    int r = 0;
    if (!absl::SimpleAtoi(part, &r)) {
      return absl::InternalError(absl::StrCat(
          "shrink: group '", group.name(), "': bad membership '", sealed, "'"));
    }
    members.push_back(r);
  }
  if (std::find(members.begin(), members.end(), group.rank()) ==
      members.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shrink: rank ", group.rank(), " of group '", group.name(),
                     "' arrived after the survivors agreed on rank(s) ",
                     absl::StrJoin(members, ", "), " (settle window ",
                     absl::FormatDuration(settle), ")"));
  }
  // The parent's options (backend, timeout, this host's address, the local
  // rank that picks the CUDA device) carry over; its subgroup counter is the
  // same on every survivor, so the name is too. The parent is aborted, so
  // the new group connects afresh through the store: new Gloo connections,
  // and on NCCL a new communicator rather than ncclCommShrink of the aborted
  // one (recovery_backends.h says why).
  absl::StatusOr<std::shared_ptr<ProcessGroup>> shrunk =
      group.NewGroup(members);
  if (!shrunk.ok()) return Annotate(shrunk.status(), "shrink");
  return shrunk;
}

}  // namespace distkit
