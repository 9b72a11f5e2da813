#include "tools/distrun/lost_rank_budget.h"

#include <iostream>

#include "absl/status/statusor.h"
#include "tools/distrun/store_counter.h"

namespace distkit {

std::function<bool(const std::string&)> LostRankBudget(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, int world_size, int min_ranks) {
  return [=](const std::string& what) -> bool {
    if (min_ranks <= 0) return false;
    const absl::StatusOr<int64_t> lost =
        AddToJobCounter(server, store_address, token, kLostRanksKey);
    if (!lost.ok()) {
      std::cerr << "distrun: node " << node_rank
                << " could not count a lost rank in the job's store at "
                << store_address << " (" << lost.status().message()
                << "); stopping the job: " << what << "\n";
      return false;
    }
    return world_size - *lost >= min_ranks;
  };
}

}  // namespace distkit
