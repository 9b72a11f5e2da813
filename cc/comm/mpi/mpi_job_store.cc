#include "cc/comm/mpi/mpi_job_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cc/comm/mpi/mpi_runtime.h"
#include "cc/core/status.h"
#include "cc/store/tcp_store.h"

namespace distkit {
namespace {

// What rank 0 broadcasts: "token\nport\nhostname\naddr,addr,...", padded.
constexpr int kMessageBytes = 2048;

absl::StatusOr<std::string> RandomToken() {
  char bytes[16];
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  const bool read_all =
      fd >= 0 && read(fd, bytes, sizeof(bytes)) == sizeof(bytes);
  if (fd >= 0) close(fd);
  if (!read_all) {
    return absl::UnavailableError("mpi job store: cannot read /dev/urandom");
  }
  return absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes)));
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

// This host's IPv4 addresses on interfaces that are up, loopback excluded,
// in the kernel's order.
std::vector<std::string> HostAddresses() {
  std::vector<std::string> out;
  struct ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return out;
  for (struct ifaddrs* i = all; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET ||
        (i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) {
      continue;
    }
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr &&
        std::find(out.begin(), out.end(), text) == out.end()) {
      out.push_back(text);
    }
  }
  freeifaddrs(all);
  return out;
}

}  // namespace

absl::StatusOr<MpiJobStore> ConnectJobStoreOverMpi(int rank, int size,
                                                   bool one_host,
                                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  DK_ASSIGN_OR_RETURN(auto world, MpiWorldRankAndSize(timeout));
  if (world.first != rank || world.second != size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mpi: the launcher says rank ", rank, " of ", size,
        " but MPI_COMM_WORLD says rank ", world.first, " of ", world.second));
  }
  MpiJobStore out;
  // Rank 0 starts the server first; a failure there still reaches the
  // others through the broadcast (an empty token), not as their timeout.
  char message[kMessageBytes] = {};
  absl::Status served;
  if (rank == 0) {
    absl::StatusOr<std::string> token = RandomToken();
    absl::StatusOr<std::unique_ptr<StoreServer>> server =
        token.ok() ? StoreServer::Start(
                         {one_host ? "127.0.0.1:0" : "0.0.0.0:0", *token})
                   : token.status();
    if (server.ok()) {
      out.server = *std::move(server);
      const std::string text =
          absl::StrCat(*token, "\n", out.server->port(), "\n", HostName(), "\n",
                       absl::StrJoin(HostAddresses(), ","));
      std::memcpy(message, text.data(),
                  std::min<size_t>(text.size(), sizeof(message) - 1));
    } else {
      served = server.status();
    }
  }
  DK_RETURN_IF_ERROR(MpiBroadcastWorld(
      message, kMessageBytes, 0,
      std::max(absl::ZeroDuration(), deadline - absl::Now())));
  if (!served.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "mpi job store: rank 0 could not serve the store: ", served.message()));
  }
  std::vector<std::string> fields = absl::StrSplit(message, '\n');
  int port = 0;
  if (fields.size() != 4 || fields[0].empty() ||
      !absl::SimpleAtoi(fields[1], &port)) {
    return absl::UnavailableError(
        "mpi job store: rank 0 could not serve the store (see its error)");
  }
  const std::string& token = fields[0];
  std::vector<std::string> hosts;
  if (one_host || rank == 0 || fields[2] == HostName()) {
    hosts.push_back("127.0.0.1");
  }
  if (!one_host && rank != 0) {
    for (absl::string_view a :
         absl::StrSplit(fields[3], ',', absl::SkipEmpty())) {
      hosts.emplace_back(a);
    }
  }
  std::vector<std::string> tried;
  for (size_t i = 0; i < hosts.size(); ++i) {
    // Each address but the last gets an equal share of what is left, at
    // most 10 s (a refused connection is retried until its share ends), the
    // last all of it.
    const absl::Duration left =
        std::max(absl::ZeroDuration(), deadline - absl::Now());
    const absl::Duration share =
        i + 1 == hosts.size()
            ? left
            : std::min(left / static_cast<int64_t>(hosts.size() - i),
                       absl::Seconds(10));
    const std::string address = absl::StrCat(hosts[i], ":", port);
    absl::StatusOr<std::unique_ptr<TcpStore>> store =
        TcpStore::Connect({address, token, Store::kDefaultTimeout, share});
    if (store.ok()) {
      out.store = *std::move(store);
      out.address = address;
      return out;
    }
    tried.push_back(std::string(store.status().message()));
  }
  return absl::UnavailableError(absl::StrCat(
      "mpi job store: rank ", rank, " reached none of rank 0's addresses (",
      absl::StrJoin(tried, "; "), ")"));
}

}  // namespace distkit
