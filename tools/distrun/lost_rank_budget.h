// How distrun decides whether the job may go on without a failed rank that
// is not replaced (--min-ranks M): the job's count of lost ranks is kept in
// its store, so that every node's distrun draws from one count, as the
// replacement budget does (replacement_budget.h). While the job keeps at
// least M ranks, a lost rank neither stops it nor is recorded under the
// job's failure key: the survivors find out through their group (a peer's
// connection or process gone) and may shrink to go on (dk_group_shrink,
// distkit.elastic).

#ifndef DISTKIT_TOOLS_DISTRUN_LOST_RANK_BUDGET_H_
#define DISTKIT_TOOLS_DISTRUN_LOST_RANK_BUDGET_H_

#include <functional>
#include <string>

#include "cc/store/store_server.h"
#include "tools/distrun/rank_supervisor.h"

namespace distkit {

// At the store's root: how many ranks the job has lost for good.
inline constexpr char kLostRanksKey[] = "distkit/lost_ranks";

// The supervisor's `release` of node `node_rank` in a job of `world_size`
// ranks that must keep `min_ranks`: each call counts one lost rank and says
// whether the job may go on without it (false once fewer than `min_ranks`
// would remain or the store cannot be reached: the job stops). `server` on
// node 0, else null and the store at `store_address` with `token`.
std::function<bool(const std::string&, const SupervisorSay&)> LostRankBudget(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, int world_size, int min_ranks);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_LOST_RANK_BUDGET_H_
