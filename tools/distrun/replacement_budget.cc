#include "tools/distrun/replacement_budget.h"

#include <iostream>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "cc/store/call_deadline.h"
#include "cc/store/hash_store.h"
#include "cc/store/tcp_store.h"

namespace distkit {

std::function<int(const std::string&)> ReplacementBudget(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, int max) {
  return [=](const std::string& what) -> int {
    if (max <= 0) return 0;
    absl::StatusOr<int64_t> n;
    if (server != nullptr) {
      n = server->state().Add(kReplacementsKey, 1);
    } else {
      // Bounded: a store that is gone means the job is, too.
      ScopedStoreDeadline bounded(absl::Now() + absl::Seconds(2));
      absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(
          {store_address, token, absl::Seconds(2), absl::Seconds(2)});
      n = store.ok() ? (*store)->Add(kReplacementsKey, 1) : store.status();
    }
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
