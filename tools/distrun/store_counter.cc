#include "tools/distrun/store_counter.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/store/call_deadline.h"
#include "cc/store/hash_store.h"
#include "cc/store/tcp_store.h"

namespace distkit {

absl::StatusOr<int64_t> AddToJobCounter(StoreServer* server,
                                        const std::string& store_address,
                                        const std::string& token,
                                        const std::string& key) {
  if (server != nullptr) return server->state().Add(key, 1);
  ScopedStoreDeadline bounded(absl::Now() + absl::Seconds(2));
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(
      {store_address, token, absl::Seconds(2), absl::Seconds(2)});
  if (!store.ok()) return store.status();
  return (*store)->Add(key, 1);
}

std::optional<int64_t> CountForJob(StoreServer* server,
                                   const std::string& store_address,
                                   const std::string& token,
                                   const std::string& key, int node_rank,
                                   const char* counted, const char* instead,
                                   const std::string& what,
                                   const SupervisorSay& say) {
  const absl::StatusOr<int64_t> n =
      AddToJobCounter(server, store_address, token, key);
  if (!n.ok()) {
    say(absl::StrCat("node ", node_rank, " could not count ", counted,
                     " in the job's store at ", store_address, " (",
                     n.status().message(), "); ", instead, ": ", what));
    return std::nullopt;
  }
  return *n;
}

}  // namespace distkit
