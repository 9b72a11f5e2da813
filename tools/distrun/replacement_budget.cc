#include "tools/distrun/replacement_budget.h"

#include <iostream>

#include "absl/status/statusor.h"
#include "tools/distrun/store_counter.h"

namespace distkit {

std::function<int(const std::string&)> ReplacementBudget(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, int max) {
  return [=](const std::string& what) -> int {
    if (max <= 0) return 0;
    const absl::StatusOr<int64_t> n =
        AddToJobCounter(server, store_address, token, kReplacementsKey);
    if (!n.ok()) {
      std::cerr << "distrun: node " << node_rank
                << " could not count a replacement in the job's store at "
                << store_address << " (" << n.status().message()
                << "); not replacing: " << what << "\n";
      return 0;
    }
    return *n <= max ? static_cast<int>(*n) : 0;
  };
}

}  // namespace distkit
