// How distrun decides whether a failed rank may be replaced
// (--max-replacements K): the job's count of replacements is kept in its
// store, so that every node's distrun draws from one budget of K. Node 0
// counts in the store it hosts; another node connects to it for the count.
// While a replacement is allowed, nothing is recorded under the job's
// failure key (cc/store/job_failure.h): that record makes the store answer
// every wait for a missing key with ABORTED, which would end the survivors'
// recovery (the grow rendezvous, the new group's address exchange) as well.

#ifndef DISTKIT_TOOLS_DISTRUN_REPLACEMENT_BUDGET_H_
#define DISTKIT_TOOLS_DISTRUN_REPLACEMENT_BUDGET_H_

#include <functional>
#include <string>

#include "cc/store/store_server.h"
#include "tools/distrun/rank_supervisor.h"

namespace distkit {

// At the store's root: how many replacements the job has started.
inline constexpr char kReplacementsKey[] = "distkit/replacements";

// The supervisor's `replace` of node `node_rank` with `max` replacements per
// job: each call takes one from the budget and returns its number n (1 for
// the job's first replacement), or 0 once the budget is spent or the store
// cannot be reached (then the job stops as without the flag). `server` on
// node 0, else null and the store at `store_address` with `token`.
std::function<int(const std::string&, const SupervisorSay&)> ReplacementBudget(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, int max);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_REPLACEMENT_BUDGET_H_
