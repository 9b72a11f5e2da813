#include "cc/group/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/comm/backend_registry.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/group/agreement_roll_call.h"
#include "cc/group/issuer.h"
#include "cc/store/call_deadline.h"
#include "cc/store/job_failure.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

// How long a timed-out rank waits for the others to report whether they
// joined the same operation.
constexpr absl::Duration kDiagnosisWindow = absl::Seconds(2);
// What the store calls of that diagnosis may take beyond the window.
constexpr absl::Duration kDiagnosisMargin = absl::Seconds(1);
// How long a group creation that failed for a peer's sake waits for the
// job's record of what killed that peer (job_failure.h).
constexpr absl::Duration kWhyWait = absl::Milliseconds(300);
// How long a failed operation waits for that record: a launcher on another
// host sees the death, reconnects to the store and writes it (0.1 s alone,
// more on loaded cores).
constexpr absl::Duration kRecordWait = absl::Seconds(1);

// Position of `value` in `v`, or -1.
int IndexOf(const std::vector<int>& v, int value) {
  auto it = std::find(v.begin(), v.end(), value);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

std::shared_ptr<Work> FailedWork(std::string description, absl::Status status) {
  auto w = std::make_shared<Work>(std::move(description));
  w->Complete(std::move(status));
  return w;
}

}  // namespace

ProcessGroup::ProcessGroup(std::string name, std::shared_ptr<Store> store,
                           std::shared_ptr<Store> world_store,
                           std::vector<int> global_ranks, int global_rank,
                           GroupOptions options)
    : name_(std::move(name)),
      store_(std::move(store)),
      world_store_(std::move(world_store)),
      global_ranks_(std::move(global_ranks)),
      global_rank_(global_rank),
      rank_(IndexOf(global_ranks_, global_rank)),
      options_(std::move(options)),
      recorder_(std::make_unique<FlightRecorder>(name_, global_rank)) {}

ProcessGroup::~ProcessGroup() {
  // Destroy is bounded: whatever is still running (only possible when no
  // Work handle keeps the group alive, e.g. a blocking call in another
  // thread) is aborted first, so the queues' joins below end at once
  // instead of waiting up to the op timeout. Abort is local to this rank.
  // (Not the lanes' Idle(): a lane ends its run after the operation's Work
  // completed, so a healthy group destroyed just after a blocking send
  // would be aborted, which on Gloo closes its connections.)
  const bool busy =
      (issue_state_.load() & kInFlightMask) != 0 || p2p_in_flight_.load() != 0;
  if (busy && contract_ != nullptr) contract_->Abort(name_);
  recorder_->WriteTimeline();
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroup::CreateWorld(
    std::shared_ptr<Store> store, int rank, int size, GroupOptions options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside [0, ", size, ")"));
  }
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  const std::string name = options.name.empty() ? "world" : options.name;
  std::shared_ptr<ProcessGroup> group(new ProcessGroup(
      name, std::make_shared<PrefixStore>(absl::StrCat("pg/", name), store),
      store, std::move(ranks), rank, std::move(options)));
  DK_RETURN_IF_ERROR(group->Connect(nullptr));
  return group;
}

absl::Status ProcessGroup::Connect(std::unique_ptr<Backend> split) {
  if (!is_member()) return absl::OkStatus();
  const std::string creating = absl::StrCat("creating group '", name_, "'");
  absl::StatusOr<BenchWithout> without = BenchWithoutFromEnvironment();
  if (!without.ok()) return Annotate(without.status(), creating);
  without_ = *without;
  std::unique_ptr<Backend> backend = std::move(split);
  if (backend == nullptr) {
    const BackendFactory* factory = FindBackend(options_.backend);
    if (factory == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("backend '", options_.backend,
                       "' is not available in this build (have: ",
                       absl::StrJoin(RegisteredBackends(), ", "), ")"));
    }
    BackendConfig config;
    config.store = std::make_shared<PrefixStore>(options_.backend, store_);
    config.rank = rank_;
    config.size = size();
    config.local_rank = options_.local_rank;
    config.hostname = options_.hostname;
    config.timeout = ConnectTimeout();
    config.names = RankNames(global_ranks_);
    absl::StatusOr<std::unique_ptr<Backend>> made = (*factory)(config);
    if (!made.ok()) {
      return Annotate(WithJobFailure(*store_, made.status(), kWhyWait),
                      creating);
    }
    backend = *std::move(made);
  }
  contract_ = std::make_unique<CollectiveContract>(std::move(backend),
                                                   without_.agreement);
  // No member returns before every member is connected: otherwise a rank that
  // destroys the group at once could cut a peer's handshake short.
  OpContext ctx;
  ctx.seq = 0;  // operations start at 1
  ctx.op = OpCode::kNewGroup;
  ctx.group_name = name_;
  // Under init's deadline (ScopedStoreDeadline), the handshake gets only
  // what is left of it: init as a whole stays within its connect timeout.
  ctx.timeout = ClampToStoreDeadline(ConnectTimeout());
  absl::Status joined = contract_->Record(contract_->Barrier(ctx));
  if (!joined.ok()) joined = WithJobFailure(*store_, joined, kWhyWait);
  return Annotate(joined, creating);
}

absl::Duration ProcessGroup::ConnectTimeout() const {
  return options_.connect_timeout > absl::ZeroDuration()
             ? options_.connect_timeout
             : options_.timeout;
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroup::NewGroup(
    std::vector<int> ranks) {
  GroupOptions options = options_;
  options.connect_timeout = absl::ZeroDuration();  // init's, not a subgroup's
  // This group's own name (a grown world's "world@g<g>") and how it was
  // made are not the child's: a numbered child of the whole parent.
  options.name.clear();
  options.members_only = false;
  return NewGroup(std::move(ranks), std::move(options));
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroup::NewGroup(
    std::vector<int> ranks, GroupOptions options) {
  if (!is_member()) {
    return absl::FailedPreconditionError(
        absl::StrCat("new_group: rank ", global_rank_,
                     " is not a member of group '", name_, "'"));
  }
  if (ranks.empty()) {
    return absl::InvalidArgumentError("new_group: the list of ranks is empty");
  }
  // Where this process runs does not change with the group: a subgroup with
  // options of its own (another backend) keeps the parent's local rank,
  // which picks its CUDA device, and the parent's address.
  options.local_rank = options_.local_rank;
  if (options.hostname.empty()) options.hostname = options_.hostname;
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("new_group: rank ", sorted[i], " is outside group '",
                       name_, "' of size ", size()));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("new_group: rank ", sorted[i], " is listed twice"));
    }
  }
  if (options.members_only) {
    if (options.name.empty()) {
      return absl::InvalidArgumentError(
          "new_group: a group only its members create needs a name");
    }
    if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "new_group: rank ", rank_, " of group '", name_,
          "' is not in the ranks of a group only its members create (",
          absl::StrJoin(ranks, ", "), ")"));
    }
  }
  std::vector<int> global;
  for (int r : ranks) global.push_back(global_ranks_[r]);
  // Only unnamed groups take a number: named ones may be made by their
  // members alone, and the numbers must stay the same on every rank.
  const std::string child = absl::StrCat(
      name_, "/",
      options.name.empty() ? absl::StrCat(++next_child_) : options.name);
  std::unique_ptr<Backend> split;
  // A parent that failed or was aborted has no connection left to split
  // (ShrinkGroup's: its NCCL communicator was aborted): the subgroup then
  // connects afresh through its store, as backends that never split do.
  // Every rank must take the same way, and a parent's failure can be one
  // rank's alone (an abort is local; a failed send fails two ranks): each
  // says through the store whether it can split, and one that can splits
  // only if every one can. One that cannot goes afresh at once, without
  // waiting for the others' answers: after a rank died (ShrinkGroup), the
  // survivors' parents have all failed, and the dead rank never answers.
  // What bounds making the subgroup among its members: the child's own
  // connect timeout, else its timeout (the parent's unless it was given).
  const absl::Duration creation = options.connect_timeout > absl::ZeroDuration()
                                      ? options.connect_timeout
                                      : options.timeout;
  bool can_split = options.backend == options_.backend &&
                   contract_->backend().splits_from_parent() &&
                   AsyncError().ok();
  // Where the store may be each rank's own (an MPI job without one), each
  // decides alone, as before.
  if (options.backend == options_.backend &&
      contract_->backend().splits_from_parent() &&
      contract_->backend().store_is_shared()) {
    const int me =
        options.members_only
            ? static_cast<int>(std::find(ranks.begin(), ranks.end(), rank_) -
                               ranks.begin())
            : rank_;
    const int n =
        options.members_only ? static_cast<int>(ranks.size()) : size();
    const std::string prefix = absl::StrCat("split/", child, "/");
    can_split = AsyncError().ok();
    DK_RETURN_IF_ERROR(
        store_->Set(absl::StrCat(prefix, me), can_split ? "1" : "0"));
    if (can_split) {
      std::vector<std::string> keys;
      for (int r = 0; r < n; ++r) keys.push_back(absl::StrCat(prefix, r));
      absl::StatusOr<std::vector<std::string>> answers =
          store_->MultiGetWithTimeout(keys, creation);
      if (!answers.ok()) {
        return WithJobFailure(
            *store_,
            Annotate(answers.status(),
                     absl::StrCat("new_group '", child, "' (rank ", rank_,
                                  "): waiting for every member's answer to "
                                  "whether it can split its connection")),
            absl::ZeroDuration());
      }
      for (const std::string& a : *answers) can_split &= a == "1";
    }
  }
  if (options.members_only && can_split) {
    // Not on this group's queue, whose sequence the other ranks do not
    // share; the backend makes it safe beside the queue (MPI: thread-safe).
    OpContext ctx;
    ctx.op = OpCode::kNewGroup;
    ctx.group_name = name_;
    ctx.timeout = creation;
    absl::StatusOr<std::unique_ptr<Backend>> made =
        contract_->CreateAmongMembers(ctx, ranks, child);
    // A member that never came may have died: say so where it is recorded.
    if (!made.ok()) {
      return WithJobFailure(*store_, made.status(), absl::ZeroDuration());
    }
    split = *std::move(made);
  } else if (can_split) {
    // The subgroup derives from this group's connection (MPI_Comm_split,
    // ncclCommSplit): a collective over this group, run in its order, and
    // bounded as the other ways of making it are (`creation`), not by this
    // group's own timeout (where the backend can bound it: NCCL's split
    // has a deadline, MPI_Comm_split none).
    DK_RETURN_IF_ERROR(RunSync({OpCode::kNewGroup, absl::OkStatus(),
                                [&](const OpContext& c) -> absl::Status {
                                  OpContext bounded = c;
                                  bounded.timeout = creation;
                                  DK_ASSIGN_OR_RETURN(
                                      split, contract_->Split(bounded, ranks));
                                  return absl::OkStatus();
                                }}));
  }
  std::shared_ptr<ProcessGroup> group(new ProcessGroup(
      child, std::make_shared<PrefixStore>(absl::StrCat("pg/", child), store_),
      world_store_, std::move(global), global_rank_, std::move(options)));
  DK_RETURN_IF_ERROR(group->Connect(std::move(split)));
  return group;
}

absl::Status ProcessGroup::CheckTensor(const TensorRef& t,
                                       absl::string_view what) const {
  DK_RETURN_IF_ERROR(t.CheckSize(what));
  if (contract_ != nullptr) {
    if (absl::Status s = contract_->CheckDevice(t.device()); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " of group '", name_, "': ", s.message()));
    }
  } else if (!t.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the ", options_.backend, " backend of group '", name_,
        "' works on cpu tensors, got one on ", t.device().ToString()));
  }
  if (t.data() == nullptr && t.numel() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": data is NULL"));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::CheckRank(int r, absl::string_view what) const {
  if (r < 0 || r >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", r, " is outside group '", name_, "' of size ", size()));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::CheckReduce(const TensorRef& t, ReduceOp op) const {
  DK_RETURN_IF_ERROR(CheckTensor(t, "data"));
  if (contract_ == nullptr) return CheckReduceOpSupported(op, t.dtype());
  return contract_->CheckReduce(op, t);
}

absl::Status ProcessGroup::AsyncError() const {
  return contract_ != nullptr ? contract_->AsyncError() : absl::OkStatus();
}

void ProcessGroup::Abort() {
  if (contract_ == nullptr) return;
  contract_->Abort(name_);
  recorder_->Dump(absl::StrCat("group '", name_, "' was aborted"));
}

namespace {

// The roll call's keys for operation `ctx`: collectives and point-to-point
// operations are numbered apart, so they are kept apart.
std::string RollCallPrefix(const OpContext& ctx) {
  return absl::StrCat(IsPointToPoint(ctx.op) ? "diag/p2p/" : "diag/", ctx.seq,
                      "/");
}

// A rank's answer: the operation's name, then where its part was on its
// device, where known.
std::string RollCallAnswer(const OpContext& ctx, DevicePlace place) {
  switch (place) {
    case DevicePlace::kNotStarted:
      return absl::StrCat(ctx.op_name(), "\nnot_started");
    case DevicePlace::kInside:
      return absl::StrCat(ctx.op_name(), "\ninside");
    case DevicePlace::kUnknown:
      break;
  }
  return std::string(ctx.op_name());
}

// "rank 3" or "ranks 0, 1, 2".
std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                      absl::StrJoin(ranks, ", "));
}

}  // namespace

void ProcessGroup::AnswerRollCall(void* group, const OpContext& ctx,
                                  DevicePlace place) {
  // Before the backend returns (it may wait long for a late device): one
  // store call, bounded, so that the others' polls hear this rank in time.
  auto* self = static_cast<ProcessGroup*>(group);
  if (!IsPointToPoint(ctx.op)) self->last_answered_seq_.store(ctx.seq + 1);
  ScopedStoreDeadline budget(absl::Now() + kDiagnosisMargin);
  (void)self->store_->Set(absl::StrCat(RollCallPrefix(ctx), self->rank_),
                          RollCallAnswer(ctx, place));
}

std::string ProcessGroup::DiagnoseLateRanks(const OpContext& ctx) {
  // The store calls below have short budgets: a store host that is frozen
  // or gone must not stretch a timed-out collective by the store's own
  // timeout per call, and an answer we do not get is "unknown", never
  // "missing". Polling for late ranks stops at the window; its calls get a
  // margin past it so that the last poll's answer still arrives under load,
  // and what is looked up after the roll call gets a margin of its own.
  const absl::Time stop_polling = absl::Now() + kDiagnosisWindow;
  // Who reached this operation, asked of the job's store: the group itself
  // can no longer be used (agreement_roll_call.h). Each rank's answer also
  // says where its part was on its device, where the backend can tell.
  const std::string prefix = RollCallPrefix(ctx);
  const DevicePlace place = contract_->backend().WhereOpFailed(ctx);
  absl::StatusOr<RollCall> call;
  {
    ScopedStoreDeadline budget(stop_polling + kDiagnosisMargin);
    call = TakeRollCall(*store_, prefix, rank_, size(),
                        RollCallAnswer(ctx, place), stop_polling);
  }
  if (!call.ok()) {
    return absl::StrCat(
        "; which ranks are late is unknown: the store did not answer within ",
        absl::FormatDuration(kDiagnosisWindow + kDiagnosisMargin), " (",
        call.status().message(), ")");
  }
  const std::vector<int>& missing = call->absent;
  // What follows gets a margin of its own: a roll call with a rank absent
  // polls to the end of the window, and the host names looked up after it
  // (two store calls) were often left too little of a shared budget on a
  // loaded machine, which dropped them from the message.
  ScopedStoreDeadline budget(absl::Now() + kDiagnosisMargin);
  if (missing.empty()) {
    if (place != DevicePlace::kUnknown) {
      const std::string places = WhereRanksWere(ctx, prefix);
      if (!places.empty()) return places;
    }
    return "; every rank reached this operation (a peer may be slow or stuck "
           "inside it)";
  }
  return LateRanksMessage(*call, contract_->SignaturesExchanged(ctx),
                          HostsOf(missing));
}

std::string ProcessGroup::WhereRanksWere(const OpContext& ctx,
                                         const std::string& prefix) {
  // Every rank's answer in one request, under the diagnosis's budget.
  std::vector<std::string> keys;
  for (int r = 0; r < size(); ++r) keys.push_back(absl::StrCat(prefix, r));
  absl::StatusOr<std::vector<std::string>> answers =
      store_->MultiGetWithTimeout(keys, kDiagnosisMargin);
  if (!answers.ok()) return "";
  std::vector<int> late, inside;
  for (int r = 0; r < size(); ++r) {
    const std::string& a = (*answers)[r];
    if (a == RollCallAnswer(ctx, DevicePlace::kNotStarted)) late.push_back(r);
    if (a == RollCallAnswer(ctx, DevicePlace::kInside)) inside.push_back(r);
  }
  if (late.empty() && inside.empty()) return "";
  std::string out = "; every rank reached this operation";
  if (!late.empty()) {
    absl::StrAppend(&out, ", but ", Ranks(late),
                    late.size() == 1 ? "'s device" : "' devices",
                    " had not started it (work queued before it on the "
                    "stream it was issued on was still running)");
  }
  if (!inside.empty()) {
    absl::StrAppend(
        &out, "; ", Ranks(inside),
        inside.size() == 1 ? " was inside it on its device"
                           : " were inside it on their devices",
        late.empty() ? " (a peer may be slow or stuck inside it)" : "");
  }
  return out;
}

std::string ProcessGroup::HostsOf(const std::vector<int>& ranks) {
  // A backend that sorts ranks by host (Gloo's: hierarchical across hosts)
  // keeps every rank's host identity, "<hostname>/<boot id>", under
  // <backend>/hosts/host/<rank> (cc/comm/shm/host_map.h); others keep none,
  // and the names are left out. Only looked at, never waited for.
  // Two store calls whatever the count: whether all are there, then all.
  PrefixStore hosts(absl::StrCat(options_.backend, "/hosts"), store_);
  constexpr size_t kMostRanks = 8;
  std::vector<std::string> keys;
  for (size_t i = 0; i < ranks.size() && i < kMostRanks; ++i) {
    keys.push_back(absl::StrCat("host/", ranks[i]));
  }
  absl::StatusOr<bool> there = hosts.Check(keys);
  if (!there.ok() || !*there) return "";
  absl::StatusOr<std::vector<std::string>> identities =
      hosts.MultiGetWithTimeout(keys, ClampToStoreDeadline(kDiagnosisMargin));
  if (!identities.ok()) return "";
  std::vector<std::string> names;
  for (const std::string& identity : *identities) {
    std::string name = identity.substr(0, identity.find('/'));
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      names.push_back(std::move(name));
    }
  }
  return absl::StrCat("on host(s) ", absl::StrJoin(names, ", "),
                      ranks.size() > kMostRanks ? ", ..." : "");
}

absl::Status ProcessGroup::Execute(const OpContext& ctx, const Body& body,
                                   int peer) {
  DK_RETURN_IF_ERROR(contract_->Usable(ctx));
  OpContext recorded = ctx;
  recorded.answer_roll_call = &ProcessGroup::AnswerRollCall;
  recorded.roll_call_group = this;
  const bool record = !without_.flight_recorder;
  if (record) {
    recorded.recorder = recorder_.get();
    recorded.record_id = recorder_->Begin(ctx, IsPointToPoint(ctx.op));
  }
  absl::Status status = body(recorded);
  // This rank reached the operation: one that ends it otherwise than by its
  // own timeout (CANCELLED, UNAVAILABLE) and so poisons the group answers
  // the roll call a rank whose operation timed out takes, which would name
  // it absent. A timeout answers in the diagnosis below.
  if (peer < 0 && !status.ok() &&
      status.code() != absl::StatusCode::kDeadlineExceeded &&
      PoisonsGroup(status)) {
    // Not where the backend answered already (with where the operation
    // was on the device: NCCL's WhereOpFailed).
    if (last_answered_seq_.load() != recorded.seq + 1) {
      AnswerRollCall(this, recorded, DevicePlace::kUnknown);
    }
  }
  if (status.code() == absl::StatusCode::kDeadlineExceeded) {
    // A send or receive waits for one peer's matching call (same tag), and
    // its number is this rank's own count of them, which no other rank
    // shares: a roll call of the group would name ranks that have nothing to
    // do with it. Its peer is the one that did not come.
    status = absl::DeadlineExceededError(absl::StrCat(
        status.message(),
        peer >= 0 ? absl::StrCat("; rank ", peer, " did not make the matching ",
                                 ctx.op == OpCode::kSend ? "receive" : "send",
                                 " (same tag) in time")
                  : DiagnoseLateRanks(ctx)));
    // A peer that died can look like a late one: Gloo's send to a killed rank
    // may wait for its receive until the timeout instead of failing on the
    // closed socket. By now a launcher that records failures has written
    // which rank died and where, so what is there is added, without waiting.
    status = WithJobFailure(*store_, status, absl::ZeroDuration());
  } else if (status.code() == absl::StatusCode::kUnavailable) {
    // A peer failed or left: a launcher that records failures (distrun:
    // job_failure.h) says which rank, how and on which host, a moment after
    // the dead rank's sockets closed; it is waited for (up to kRecordWait,
    // on this failure path only) only where such a launcher said it will.
    const absl::Status lost = status;
    status = WithJobFailure(
        *store_, status,
        FailuresAreRecorded(*store_) ? kRecordWait : absl::ZeroDuration());
    // Unrecorded, and the backend cannot name the peer (NCCL): the roll call
    // a timeout takes, under the same keys, so ranks whose operation timed
    // out and ranks that saw a peer's abort first answer one roll call.
    if (status == lost && !IsPointToPoint(ctx.op) &&
        !contract_->backend().NamesLostPeers()) {
      status = absl::UnavailableError(
          absl::StrCat(status.message(), DiagnoseLateRanks(ctx)));
    }
  }
  if (record) recorder_->End(recorded.record_id, status);
  status = contract_->Record(std::move(status));
  // A failure that poisons the group: every rank writes what it was doing,
  // so the launcher can say who never reached this operation.
  if (PoisonsGroup(status)) recorder_->Dump(status.message());
  return status;
}

std::shared_ptr<OpQueue> ProcessGroup::LaneFor(const Op& op) {
  // Sends and receives get one lane per (peer, direction), and per tag
  // where the backend matches them by tag (Backend::ConcurrentTags): a send
  // must not wait behind a receive that needs the peer's own send to
  // finish, nor behind a send of another tag that the peer will receive
  // only later (torch's and MPI's isend / irecv complete in any tag order).
  // Within a lane they run in order.
  std::vector<std::shared_ptr<OpQueue>> idle;  // stopped after the lock
  LightMutexLock lock(&mu_);
  const int tag = contract_->backend().ConcurrentTags() ? op.tag : 0;
  std::shared_ptr<OpQueue>& lane =
      p2p_lanes_[{op.peer, op.code == OpCode::kSend, tag}];
  if (lane == nullptr) {
    // Each lane has a worker thread: a program that uses many tags (one
    // per step, say) must not accumulate them. Idle lanes nobody holds go
    // once there are more than a few per peer; a later operation on their
    // key gets a new one, in order, since theirs all finished.
    if (p2p_lanes_.size() > 4 * static_cast<size_t>(size()) + 8) {
      for (auto it = p2p_lanes_.begin(); it != p2p_lanes_.end();) {
        if (it->second != nullptr && it->second.use_count() == 1 &&
            it->second->Idle()) {
          idle.push_back(std::move(it->second));
          it = p2p_lanes_.erase(it);
        } else {
          ++it;
        }
      }
    }
    lane = std::make_shared<OpQueue>();
  }
  return lane;
}

// The context of the next operation: collectives share one sequence, the same
// on every rank; sends and receives are numbered apart so they do not shift it.
OpContext ProcessGroup::NextContext(const Op& op) {
  OpContext ctx;
  ctx.op = op.code;
  ctx.group_name = name_;
  ctx.timeout = options_.timeout;
  ctx.seq = op.peer >= 0 ? ++next_p2p_seq_ : ++next_seq_;
  return ctx;
}

absl::Status ProcessGroup::Rejection(const Op& op) const {
  if (!is_member()) {
    return absl::FailedPreconditionError(
        absl::StrCat(OpCodeName(op.code), ": rank ", global_rank_,
                     " is not a member of group '", name_, "' (ranks ",
                     absl::StrJoin(global_ranks_, ", "), ")"));
  }
  if (!op.checked.ok()) {
    return Annotate(op.checked, absl::StrCat(OpCodeName(op.code), " on group '",
                                             name_, "' (rank ", rank_, ")"));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::ClaimIssue(const Op& op) {
  if (op.peer >= 0) return absl::OkStatus();
  // One word, not a lock (this runs on every collective): the issuer
  // (issuer.h: the calling thread unless it names another) and the count of
  // its collectives in flight.
  const uint64_t me = uint64_t{CurrentIssuer()} << 32;
  uint64_t state = issue_state_.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t in_flight = state & kInFlightMask;
    if (in_flight > 0 && (state & ~kInFlightMask) != me) {
      return absl::FailedPreconditionError(absl::StrCat(
          OpCodeName(op.code), " on group '", name_, "' (rank ", rank_,
          "): issued while another thread's collective(s) on this group are "
          "in flight (",
          in_flight,
          "); a group's collectives must come from one thread at a time, in "
          "the same order on every rank (use one group per thread; code "
          "that hands its one sequence of calls from thread to thread names "
          "one issuer for them: IssuerScope, dk_issuer_set)"));
    }
    if (issue_state_.compare_exchange_weak(state, me | (in_flight + 1),
                                           std::memory_order_acquire,
                                           std::memory_order_relaxed)) {
      return absl::OkStatus();
    }
  }
}

void ProcessGroup::ReleaseIssue() {
  issue_state_.fetch_sub(1, std::memory_order_release);
}

std::shared_ptr<Work> ProcessGroup::Submit(Op op) {
  if (absl::Status rejected = Rejection(op); !rejected.ok()) {
    return FailedWork(OpCodeName(op.code), std::move(rejected));
  }
  if (absl::Status refused = ClaimIssue(op); !refused.ok()) {
    return FailedWork(OpCodeName(op.code), std::move(refused));
  }
  const bool collective = op.peer < 0;
  absl::StatusOr<void*> mark = MarkIssue(op);
  if (!mark.ok()) {
    if (collective) ReleaseIssue();
    return FailedWork(OpCodeName(op.code), mark.status());
  }
  OpContext ctx = NextContext(op);
  ctx.issue_mark = *mark;
  auto work = std::make_shared<Work>(ctx.Describe());
  // Collectives run on the group's queue; a send or receive on its lane,
  // held (not let go as idle) until the operation is posted.
  std::shared_ptr<OpQueue> lane = collective ? nullptr : LaneFor(op);
  if (!collective) p2p_in_flight_.fetch_add(1);
  (collective ? queue_ : *lane)
      .Post([this, ctx, body = std::make_shared<Body>(std::move(op.body)), work,
             collective, peer = op.peer] {
        absl::Status status = Execute(ctx, *body, peer);
        if (ctx.issue_mark != nullptr) {
          contract_->backend().ReleaseIssueMark(ctx.issue_mark);
        }
        if (collective) {
          ReleaseIssue();
        } else {
          p2p_in_flight_.fetch_sub(1);
        }
        work->Complete(std::move(status));
      });
  return work;
}

absl::Status ProcessGroup::SetCudaStream(void* stream) {
  if (contract_ == nullptr) return absl::OkStatus();  // not a member
  return contract_->backend().SetCudaStream(stream);
}

void* ProcessGroup::cuda_stream() const {
  return contract_ != nullptr ? contract_->backend().cuda_stream() : nullptr;
}

absl::StatusOr<void*> ProcessGroup::MarkIssue(const Op& op) {
  if (op.device.is_cpu()) return nullptr;
  absl::StatusOr<void*> mark = contract_->backend().MarkIssue(op.device);
  if (!mark.ok()) {
    return Annotate(mark.status(),
                    absl::StrCat(OpCodeName(op.code), " on group '", name_,
                                 "' (rank ", rank_, ")"));
  }
  return mark;
}

absl::Status ProcessGroup::RunSync(Op op) {
  if (absl::Status rejected = Rejection(op); !rejected.ok()) return rejected;
  // Sends and receives go through their own lanes (see LaneFor).
  if (op.peer >= 0) return Submit(std::move(op))->Wait();
  DK_RETURN_IF_ERROR(ClaimIssue(op));
  absl::StatusOr<void*> mark = MarkIssue(op);
  if (!mark.ok()) {
    ReleaseIssue();
    return mark.status();
  }
  OpContext ctx = NextContext(op);
  ctx.issue_mark = *mark;
  absl::Status status;
  queue_.Run([&] { status = Execute(ctx, op.body); });
  if (ctx.issue_mark != nullptr) {
    contract_->backend().ReleaseIssueMark(ctx.issue_mark);
  }
  ReleaseIssue();
  return status;
}

}  // namespace distkit
