#include "cc/group/grow.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cc/core/status.h"
#include "cc/group/recovery_backends.h"
#include "cc/store/call_deadline.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(10);
// What the last store calls of the agreement (the seal at the deadline, its
// read-back) may take past the timeout.
constexpr absl::Duration kSealMargin = absl::Seconds(2);
constexpr char kFailed[] = "failed:";

// This process, unlike any other: a new process of the same rank (a
// replacement) has another id, so a seal names processes, not ranks.
const std::string& ProcessId() {
  static const std::string* id = [] {
    char bytes[8] = {};
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      (void)!read(fd, bytes, sizeof(bytes));
      close(fd);
    }
    return new std::string(absl::StrCat(
        getpid(), "-",
        absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)))));
  }();
  return *id;
}

std::string Key(int g, absl::string_view what) {
  return absl::StrCat(g, "/", what);
}

// Registers at the first unsealed generation and waits for its seal (or
// seals it): the generation this process is a member of.
absl::StatusOr<int> Agree(Store& elastic, int rank, int world_size,
                          absl::Time deadline) {
  const std::string& me = ProcessId();
  int g = 1;
  while (true) {
    while (true) {
      DK_ASSIGN_OR_RETURN(bool sealed, elastic.Check({Key(g, "members")}));
      if (!sealed) break;
      ++g;
    }
    DK_RETURN_IF_ERROR(elastic.Set(Key(g, absl::StrCat("alive/", rank)), me));
    std::vector<std::string> alive;
    for (int r = 0; r < world_size; ++r)
      alive.push_back(Key(g, absl::StrCat("alive/", r)));
    std::string seal;
    while (true) {
      DK_ASSIGN_OR_RETURN(bool sealed, elastic.Check({Key(g, "members")}));
      DK_ASSIGN_OR_RETURN(bool all, elastic.Check(alive));
      if (sealed || all) {
        std::string proposal;
        if (all && !sealed) {
          DK_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                              elastic.MultiGet(alive));
          proposal = absl::StrJoin(ids, ",");
        }
        // The first proposal to land is everyone's membership.
        DK_ASSIGN_OR_RETURN(
            seal, elastic.CompareSet(Key(g, "members"), "", proposal));
        if (!seal.empty()) break;
      }
      if (absl::Now() >= deadline) {
        std::vector<int> missing;
        for (int r = 0; r < world_size; ++r) {
          DK_ASSIGN_OR_RETURN(bool here, elastic.Check({alive[r]}));
          if (!here) missing.push_back(r);
        }
        DK_ASSIGN_OR_RETURN(
            seal, elastic.CompareSet(
                      Key(g, "members"), "",
                      absl::StrCat(kFailed, absl::StrJoin(missing, ","))));
        break;
      }
      absl::SleepFor(kPoll);
    }
    if (absl::StartsWith(seal, kFailed)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "generation ", g, " of ", world_size, " ranks failed: rank(s) ",
          seal.substr(sizeof(kFailed) - 1),
          " did not arrive in time (a survivor calls grow; a replacement "
          "process joins from init under DISTKIT_REPLACEMENT)"));
    }
    const std::vector<std::string> members = absl::StrSplit(seal, ',');
    if (static_cast<int>(members.size()) == world_size && members[rank] == me) {
      return g;
    }
    // Sealed without this process: it came late; the next generation.
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("generation ", g,
                       " was agreed without this process and time ran "
                       "out before the next"));
    }
    ++g;
  }
}

// What Grow refuses before anything happens (GrowGroup checks it before it
// aborts the group).
absl::Status CheckGrowArguments(const std::shared_ptr<Store>& world_store,
                                int rank, int world_size,
                                const std::string& backend) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("world rank ", rank, " is outside [0, ", world_size, ")"));
  }
  DK_RETURN_IF_ERROR(CheckRecoverableBackend(backend, "the world"));
  if (world_store == nullptr) {
    return absl::FailedPreconditionError("the group has no world store");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> Grow(
    std::shared_ptr<Store> world_store, int rank, int world_size,
    GroupOptions options, absl::Duration timeout) {
  DK_RETURN_IF_ERROR(
      CheckGrowArguments(world_store, rank, world_size, options.backend));
  // The agreement ends early enough for its last store calls (the seal of
  // a generation that failed, which every participant must read) to fit
  // in kSealMargin within any store deadline that encloses this call
  // (call_deadline.h: the earliest wins); without that seal the others
  // would count a process that gave up as registered.
  const absl::Time deadline =
      std::min(absl::Now() + timeout, StoreCallDeadline() - kSealMargin);
  int g = 0;
  {
    ScopedStoreDeadline bound(deadline + kSealMargin);
    PrefixStore elastic("elastic", world_store);
    DK_ASSIGN_OR_RETURN(g, Agree(elastic, rank, world_size, deadline));
  }
  // The new world's connections get what is left of the timeout, and at
  // least its margin. On NCCL it is a new communicator among the members,
  // on each one's cuda:<local rank> (options.local_rank: the survivor's
  // group's, the replacement's from LOCAL_RANK); recovery_backends.h says
  // why not ncclCommShrink.
  ScopedStoreDeadline bound(std::max(deadline, absl::Now() + kSealMargin));
  options.name = absl::StrCat("world@g", g);
  return ProcessGroup::CreateWorld(std::move(world_store), rank, world_size,
                                   std::move(options));
}

}  // namespace

absl::StatusOr<std::shared_ptr<ProcessGroup>> GrowGroup(
    ProcessGroup& group, int world_size, absl::Duration timeout) {
  if (!group.is_member()) {
    return absl::FailedPreconditionError(
        absl::StrCat("grow: rank ", group.global_rank(),
                     " is not a member of group '", group.name(), "'"));
  }
  DK_RETURN_IF_ERROR(CheckRecoverableBackend(
      group.backend_name(), absl::StrCat("grow: group '", group.name(), "'")));
  // group.rank() is the rank within the group; a grow's place is the world
  // rank.
  const std::string context =
      absl::StrCat("grow of group '", group.name(), "' (world rank ",
                   group.global_rank(), ")");
  // A call that cannot grow leaves the group as it was.
  absl::Status valid =
      CheckGrowArguments(group.world_store(), group.global_rank(), world_size,
                         group.options().backend);
  if (!valid.ok()) return Annotate(valid, context);
  // Nothing may still run on the group it replaces (on NCCL: ncclCommAbort).
  group.Abort();
  absl::StatusOr<std::shared_ptr<ProcessGroup>> grown =
      Grow(group.world_store(), group.global_rank(), world_size,
           group.options(), timeout);
  if (!grown.ok()) return Annotate(grown.status(), context);
  return grown;
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> JoinGrownWorld(
    std::shared_ptr<Store> world_store, int rank, int world_size,
    GroupOptions options, absl::Duration timeout) {
  absl::StatusOr<std::shared_ptr<ProcessGroup>> grown = Grow(
      std::move(world_store), rank, world_size, std::move(options), timeout);
  if (!grown.ok()) {
    return Annotate(grown.status(),
                    absl::StrCat("grow: replacement of rank ", rank));
  }
  return grown;
}

absl::StatusOr<bool> GrowPending(ProcessGroup& group, int world_size) {
  if (group.world_store() == nullptr) {
    return absl::FailedPreconditionError("the group has no world store");
  }
  PrefixStore elastic("elastic", group.world_store());
  ScopedStoreDeadline bound(absl::Now() + group.timeout());
  int g = 1;  // the first unsealed generation, where a newcomer registers
  while (true) {
    DK_ASSIGN_OR_RETURN(bool sealed, elastic.Check({Key(g, "members")}));
    if (!sealed) break;
    ++g;
  }
  for (int r = 0; r < world_size; ++r) {
    DK_ASSIGN_OR_RETURN(bool here,
                        elastic.Check({Key(g, absl::StrCat("alive/", r))}));
    if (here) return true;
  }
  return false;
}

int WorldGeneration(const ProcessGroup& group) {
  const std::string world = group.name().substr(0, group.name().find('/'));
  int g = 0;
  if (!absl::StartsWith(world, "world@g") ||
      !absl::SimpleAtoi(absl::string_view(world).substr(7), &g)) {
    return 0;
  }
  return g;
}

}  // namespace distkit
