#include "tools/distrun/lost_rank_budget.h"

#include "tools/distrun/store_counter.h"

namespace distkit {

std::function<bool(const std::string&, const SupervisorSay&)> LostRankBudget(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, int world_size, int min_ranks) {
  return [=](const std::string& what, const SupervisorSay& say) -> bool {
    if (min_ranks <= 0) return false;
    const std::optional<int64_t> lost =
        CountForJob(server, store_address, token, kLostRanksKey, node_rank,
                    "a lost rank", "stopping the job", what, say);
    return lost.has_value() && world_size - *lost >= min_ranks;
  };
}

}  // namespace distkit
