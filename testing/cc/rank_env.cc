#include "testing/cc/rank_env.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "cc/core/status.h"
#include "cc/store/tcp_store.h"
#include "testing/c/prefault.h"

namespace distkit {
namespace testing {

absl::StatusOr<RankEnv> ConnectJob() {
  // What the tests time is the library, not the disk: see prefault.h.
  dk_test_prefault_files();
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
  // DISTKIT_TEST_HOSTS=H: the ranks declare H "hosts" of consecutive ranks
  // (DISTKIT_HOST_ID), so one machine runs the path across hosts.
  if (const char* hosts = std::getenv("DISTKIT_TEST_HOSTS")) {
    const int h = std::atoi(hosts);
    if (h > 0) {
      const std::string id = absl::StrCat(
          "test-host-", env.info.rank * h / std::max(1, env.info.world_size));
      setenv("DISTKIT_HOST_ID", id.c_str(), 1);
    }
  }
  return env;
}

absl::StatusOr<RankEnv> JoinJob(absl::Duration timeout,
                                const std::string& backend,
                                absl::Duration connect_timeout) {
  DK_ASSIGN_OR_RETURN(RankEnv env, ConnectJob());
  GroupOptions options;
  options.timeout = timeout;
  options.connect_timeout = connect_timeout;
  options.backend = backend;
  options.local_rank = env.info.local_rank;
  DK_ASSIGN_OR_RETURN(env.world,
                      ProcessGroup::CreateWorld(env.store, env.info.rank,
                                                env.info.world_size, options));
  return env;
}

}  // namespace testing
}  // namespace distkit
