// A counter at the root of the job's store that every node's distrun adds
// to (the replacement budget, the lost ranks): node 0 counts in the store
// it hosts; another node connects to it, bounded by 2 s (a store that is
// gone means the job is, too).

#ifndef DISTKIT_TOOLS_DISTRUN_STORE_COUNTER_H_
#define DISTKIT_TOOLS_DISTRUN_STORE_COUNTER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cc/store/store_server.h"
#include "tools/distrun/rank_supervisor.h"

namespace distkit {

// Adds 1 to `key` and returns the new value. `server` on node 0, else null
// and the store at `store_address` with `token`.
absl::StatusOr<int64_t> AddToJobCounter(StoreServer* server,
                                        const std::string& store_address,
                                        const std::string& token,
                                        const std::string& key);

// AddToJobCounter by node `node_rank`'s distrun. When the store cannot be
// reached, says (`say`) that it could not count `counted` and that, for
// `what`, it does `instead`; then returns nullopt.
std::optional<int64_t> CountForJob(StoreServer* server,
                                   const std::string& store_address,
                                   const std::string& token,
                                   const std::string& key, int node_rank,
                                   const char* counted, const char* instead,
                                   const std::string& what,
                                   const SupervisorSay& say);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_STORE_COUNTER_H_
