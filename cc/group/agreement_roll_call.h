// Which ranks reached a point, asked of the job store rather than the group:
// the agreement for a group that can no longer be used (a collective that
// timed out; agreement.h needs working collectives). Each rank sets
// <prefix><rank>; a rank polls every rank's key until all are there or
// polling stops. Depends only on the store, so ProcessGroup itself can use
// it.

#ifndef DISTKIT_CC_GROUP_AGREEMENT_ROLL_CALL_H_
#define DISTKIT_CC_GROUP_AGREEMENT_ROLL_CALL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc/store/store.h"

namespace distkit {

struct RollCall {
  std::vector<int> present;  // ranks whose key was there, ascending
  std::vector<int> absent;
};

// Sets <prefix><rank> to `value`, then checks the keys of ranks 0..size-1
// every `poll_interval` until all are there or `stop_polling` passes. An
// error means the store did not answer, so who is missing is unknown (bound
// the calls with a ScopedStoreDeadline, call_deadline.h); a deadline that
// cuts a later poll short gives the last complete poll instead.
absl::StatusOr<RollCall> TakeRollCall(
    Store& store, absl::string_view prefix, int rank, int size,
    absl::string_view value, absl::Time stop_polling,
    absl::Duration poll_interval = absl::Milliseconds(100));

// What a timed-out operation's roll call says when some ranks did not
// answer (call.absent not empty), as the end of its error message.
// `exchanged`: this rank saw every rank's signature for the operation, so
// every rank reached it, and an absent rank either finished it (a rank whose
// call succeeded does not answer) or is stuck inside it; otherwise the
// absent ranks never joined it. `hosts`: where the absent ranks run ("on
// host(s) ..."), or empty.
std::string LateRanksMessage(const RollCall& call, bool exchanged,
                             absl::string_view hosts);

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_AGREEMENT_ROLL_CALL_H_
