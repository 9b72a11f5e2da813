#include "testing/cc/rank_env.h"

#include "cc/core/status.h"
#include "cc/store/tcp_store.h"

namespace distkit {
namespace testing {

absl::StatusOr<RankEnv> JoinJob(absl::Duration timeout,
                                const std::string& backend) {
  RankEnv env;
  Environment vars = Environment::FromProcess();
  DK_ASSIGN_OR_RETURN(env.info, ParseRendezvous(InferLauncher(vars), vars));
  if (env.info.store_address.empty()) {
    return absl::FailedPreconditionError(
        "not launched by distrun (no DISTKIT_STORE)");
  }
  DK_ASSIGN_OR_RETURN(
      std::unique_ptr<TcpStore> store,
      TcpStore::Connect({env.info.store_address, env.info.token,
                         absl::Seconds(60), absl::Seconds(60)}));
  env.store = std::move(store);
  GroupOptions options;
  options.timeout = timeout;
  options.backend = backend;
  options.local_rank = env.info.local_rank;
  DK_ASSIGN_OR_RETURN(env.world,
                      ProcessGroup::CreateWorld(env.store, env.info.rank,
                                                env.info.world_size, options));
  return env;
}

}  // namespace testing
}  // namespace distkit
