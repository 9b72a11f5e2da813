#include "tools/distrun/job_failure_notice.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/store/call_deadline.h"
#include "cc/store/hash_store.h"
#include "cc/store/job_failure.h"
#include "cc/store/tcp_store.h"

namespace distkit {

std::function<void(const std::string&, const SupervisorSay&)> JobFailureNotice(
    StoreServer* server, std::string store_address, std::string token,
    int node_rank, std::atomic<bool>* unreached) {
  // The host's name, so that a rank on another host reads where it happened.
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string where =
      absl::StrCat("node ", node_rank, " (host ", host, ")");
  return [=](const std::string& what, const SupervisorSay& say) {
    const std::string report =
        absl::StrCat(what, ", as distrun on ", where, " saw");
    if (server != nullptr) {
      (void)ReportJobFailure(server->state(), report);
      return;
    }
    // Bounded: the store's node may be gone too; the SIGTERM follows anyway.
    ScopedStoreDeadline bounded(absl::Now() + absl::Milliseconds(500));
    absl::StatusOr<std::unique_ptr<TcpStore>> store =
        TcpStore::Connect({store_address, token, absl::Milliseconds(500),
                           absl::Milliseconds(500)});
    // Unreached: no connection at all (a store that answered but was slow
    // to take the record is not gone, and gets the report's full bound).
    if (!store.ok() && unreached != nullptr) unreached->store(true);
    absl::Status s =
        store.ok() ? ReportJobFailure(**store, report) : store.status();
    if (!s.ok()) {
      say(absl::StrCat("could not tell the job's store at ", store_address,
                       " that ", what, ": ", s.message()));
    }
  };
}

}  // namespace distkit
