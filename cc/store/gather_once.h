// GatherOnce: every rank's value, gathered through the store by one rank
// instead of by every rank.
//
// The plain way (each rank sets `<prefix><rank>`, then waits for every
// rank's key) has the store look up and send all N values to each of the N
// ranks: N^2 keys, all in the store server's one thread. At 512 ranks on two
// cores that thread was the job's bottleneck for the last part of start-up
// (tools/dkbench/RESULTS.md). Here each rank sets its key; rank 0 waits for
// all N (one request, which the server rechecks from the first key still
// missing), combines them and sets one key, which every other rank reads:
// about 2N keys read in all, and two store calls a rank (rank 0: three). The
// per-rank keys stay, for whoever diagnoses a failure.
//
// Like the rest of a group's creation, a prefix is used once. A rank that
// never arrives: rank 0's wait ends at `timeout` naming the missing keys, as
// before, and rank 0 publishes that error in the combined key, so the
// others' waits end then too, with it. Any other failure of rank 0's (a store
// error) is published alike, so no rank waits out its timeout for a value
// that will not come; only a rank 0 that dies leaves them to their own
// timeout, after which each names the missing keys itself (a wait of no time
// on them, within a short budget of its own).
//
//   DK_ASSIGN_OR_RETURN(std::string table,
//       GatherOnce(store, "host/", "host identity", rank, size, mine,
//                  JoinIdentities, timeout));

#ifndef DISTKIT_CC_STORE_GATHER_ONCE_H_
#define DISTKIT_CC_STORE_GATHER_ONCE_H_

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc/store/store.h"

namespace distkit {

// combine(values) with values[r] = rank r's `mine`, computed by rank 0 and
// returned on every rank. `what` names the values in a timeout's message.
absl::StatusOr<std::string> GatherOnce(
    Store& store, absl::string_view prefix, absl::string_view what, int rank,
    int size, absl::string_view mine,
    absl::FunctionRef<std::string(const std::vector<std::string>&)> combine,
    absl::Duration timeout);

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_GATHER_ONCE_H_
