#include "tools/distrun/replacement_budget.h"

#include "tools/distrun/store_counter.h"

namespace distkit {

std::function<int(const std::string&, const SupervisorSay&)> ReplacementBudget(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, int max) {
  return [=](const std::string& what, const SupervisorSay& say) -> int {
    if (max <= 0) return 0;
    const std::optional<int64_t> n =
        CountForJob(server, store_address, token, kReplacementsKey, node_rank,
                    "a replacement", "not replacing", what, say);
    return n.has_value() && *n <= max ? static_cast<int>(*n) : 0;
  };
}

}  // namespace distkit
