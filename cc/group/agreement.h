// Cross-rank agreement: the one place where ranks that must decide together
// do so (the per-operation signature check is the collective contract's).
// A rank that finds a problem of its own (a parameter it cannot shard, a
// state dict that does not fit the model, a file it cannot write) must not
// simply return: the others would wait in the next collective for a rank
// that never comes. Every rank brings its status to an agreement instead, and
// all of them get the same verdict: OK, or the problem of the lowest-ranked
// rank that had one, with its code, its message and which rank it was.
//
//   DK_ASSIGN_OR_RETURN(Verdict v,
//                       AgreeOnVerdict(group, Verdict::Mine(group, local)));
//   if (!v.ok()) return v.status;   // or a message that names v.job_rank
//
// A verdict can be carried on to another group (HYBRID_* sharding agrees
// over the replicate group, then the node group), so it names ranks by
// their rank in the job. Also here: whether every rank holds rank 0's values
// (FindValueMismatch). When the group itself can no longer be used (a
// timed-out collective), agreement_roll_call.h asks the store instead.

#ifndef DISTKIT_CC_GROUP_AGREEMENT_H_
#define DISTKIT_CC_GROUP_AGREEMENT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "cc/group/process_group.h"

namespace distkit {

// What the ranks agreed on: OK, or one rank's problem, the same on every rank.
struct Verdict {
  absl::Status status;  // OK, or the problem as its rank reported it
  int job_rank = -1;    // the rank it came from, in the job; -1 when OK

  bool ok() const { return status.ok(); }
  // This rank's own status, as what it brings to an agreement over `group`.
  static Verdict Mine(const ProcessGroup& group, absl::Status status);
  // job_rank's rank in `group`, or -1 when it is not a member.
  int RankIn(const ProcessGroup& group) const;
};

// Collective over `group`: every rank brings a verdict (its own status, or
// one an agreement over another group gave it) and all return the same one:
// OK when every rank brought OK, else the one brought by the lowest group
// rank that brought a problem. The error status is only for the agreement
// itself failing (the group cannot communicate).
absl::StatusOr<Verdict> AgreeOnVerdict(ProcessGroup& group,
                                       const Verdict& mine);

// Collective over `group` when only `root` has something to check (a state
// dict read on rank 0 only): root's verdict, on every rank. What the other
// ranks bring is not read.
absl::StatusOr<Verdict> AgreeOnRootVerdict(ProcessGroup& group,
                                           const Verdict& mine, int root = 0);

// Where a rank's values first differ from rank 0's (ranks of the group).
struct ValueMismatch {
  int rank = -1;
  // The first record (record_size values) that differs; -1 when the ranks
  // do not even have the same number of records.
  int64_t record = -1;
  // Rank 0's record and `rank`'s (with record -1: their record counts).
  std::vector<int64_t> rank0_values;
  std::vector<int64_t> rank_values;
};

// Collective over `group`: whether every rank holds the same `mine` as rank
// 0, compared as records of `record_size` values (a parameter's dtype and
// numel, say). nullopt when they all agree; else, the same on every rank,
// the first record that differs and the lowest rank that differs there (or,
// when the counts differ, the lowest rank whose count does).
absl::StatusOr<std::optional<ValueMismatch>> FindValueMismatch(
    ProcessGroup& group, absl::Span<const int64_t> mine, int record_size = 1);

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_AGREEMENT_H_
