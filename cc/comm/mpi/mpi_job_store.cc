#include "cc/comm/mpi/mpi_job_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cc/comm/mpi/mpi_library.h"
#include "cc/comm/mpi/mpi_runtime.h"
#include "cc/core/status.h"
#include "cc/store/call_deadline.h"
#include "cc/store/hash_store.h"
#include "cc/store/tcp_store.h"

namespace distkit {
namespace {

// Each rank's part of the first all-gather: a flag (its rank and size agree
// with MPI's) and its hostname.
constexpr int kCardBytes = 256;
// Rank 0's broadcast: "token\nport\naddr,addr,...", whole addresses only.
constexpr int kMessageBytes = 2048;
// How long reaching the store may take in all, and an address that is not
// the last (rank 0's server listens before it says where, so a right
// address answers at once).
constexpr absl::Duration kReachBound = absl::Minutes(1);
constexpr absl::Duration kWrongAddressBound = absl::Seconds(2);

// A buffer MPI reads or writes; leaked where its collective was abandoned
// (MpiWorldCollective), since MPI may still touch it.
class MpiBuffer {
 public:
  explicit MpiBuffer(size_t bytes) : data_(new char[bytes]()) {}
  ~MpiBuffer() {
    if (MpiRequestAbandoned()) data_.release();
  }
  char* get() { return data_.get(); }

 private:
  std::unique_ptr<char[]> data_;
};

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
  char name[kCardBytes] = {};
  if (gethostname(name, sizeof(name) - 2) != 0) return "";
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

absl::Time Sooner(absl::Time a, absl::Time b) { return a < b ? a : b; }

absl::Duration Left(absl::Time deadline) {
  return std::max(absl::ZeroDuration(), deadline - absl::Now());
}

// The store at one of `hosts` (in turn) and `port`, proven by one call
// through the handshake; the errors of those tried where none answers.
absl::StatusOr<std::unique_ptr<TcpStore>> Reach(
    const std::vector<std::string>& hosts, int port, const std::string& token,
    absl::Time deadline, std::vector<std::string>* tried) {
  for (size_t i = 0; i < hosts.size(); ++i) {
    const absl::Time until =
        i + 1 == hosts.size()
            ? deadline
            : Sooner(deadline, absl::Now() + kWrongAddressBound);
    const std::string address = absl::StrCat(hosts[i], ":", port);
    absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(
        {address, token, Store::kDefaultTimeout, Left(until)});
    absl::Status proven = store.status();
    if (store.ok()) {
      ScopedStoreDeadline bound(until);
      proven = (*store)->Check({"distkit/mpi_job_store"}).status();
    }
    if (proven.ok()) return store;
    tried->push_back(absl::StrCat(address, ": ", proven.message()));
  }
  return absl::UnavailableError("none answered");
}

}  // namespace

absl::StatusOr<MpiJobStore> ConnectJobStoreOverMpi(int rank, int size,
                                                   absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  DK_ASSIGN_OR_RETURN(auto world, MpiWorldRankAndSize(timeout));
  if (MpiRequestAbandoned()) {
    return absl::FailedPreconditionError(
        "mpi job store: an earlier MPI operation of this process timed out "
        "and is still pending; start the job again");
  }
  const MpiLibrary& mpi = Mpi();
  const int n = world.second;
  // 1. Every rank's hostname, and whether its launcher agrees with MPI (a
  // rank that does not still takes part, so all fail alike).
  const bool agrees = world.first == rank && world.second == size;
  MpiBuffer card(kCardBytes), cards(static_cast<size_t>(kCardBytes) * n);
  card.get()[0] = agrees ? '1' : '0';
  const std::string host = HostName();
  std::memcpy(card.get() + 1, host.data(), host.size());
  DK_RETURN_IF_ERROR(MpiWorldCollective(
      "the hostnames' all-gather",
      [&](MPI_Request* r) {
        return mpi.Iallgather(card.get(), kCardBytes, mpi.byte, cards.get(),
                              kCardBytes, mpi.byte, mpi.comm_world, r);
      },
      Left(deadline)));
  std::vector<int> disagree;
  bool one_host = true;
  const std::string host0(cards.get() + 1);
  for (int r = 0; r < n; ++r) {
    const char* c = cards.get() + static_cast<size_t>(kCardBytes) * r;
    if (c[0] != '1') disagree.push_back(r);
    if (host0 != c + 1) one_host = false;
  }
  if (!disagree.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mpi: the launcher's rank and size disagree with MPI_COMM_WORLD's on "
        "rank(s) ",
        absl::StrJoin(disagree, ", "),
        agrees ? ""
               : absl::StrCat(" (here: the launcher says rank ", rank, " of ",
                              size, ", MPI rank ", world.first, " of ",
                              world.second, ")")));
  }
  // 2. Rank 0 serves the store and says where: an empty token if it could
  // not, so the others fail at once too.
  MpiJobStore out;
  MpiBuffer message(kMessageBytes);
  absl::Status served;
  if (rank == 0) {
    absl::StatusOr<std::string> token = RandomToken();
    absl::StatusOr<std::unique_ptr<StoreServer>> server =
        token.ok() ? StoreServer::Start(
                         {one_host ? "127.0.0.1:0" : "0.0.0.0:0", *token})
                   : token.status();
    if (server.ok()) {
      out.server = *std::move(server);
      std::string text = absl::StrCat(*token, "\n", out.server->port(), "\n");
      for (const std::string& a : HostAddresses()) {
        if (text.size() + a.size() + 1 >= kMessageBytes) break;
        absl::StrAppend(&text, a, ",");
      }
      std::memcpy(message.get(), text.data(), text.size());
    } else {
      served = server.status();
    }
  }
  DK_RETURN_IF_ERROR(MpiWorldCollective(
      "the store address's broadcast",
      [&](MPI_Request* r) {
        return mpi.Ibcast(message.get(), kMessageBytes, mpi.byte, 0,
                          mpi.comm_world, r);
      },
      Left(deadline)));
  message.get()[kMessageBytes - 1] = '\0';
  std::vector<std::string> fields = absl::StrSplit(message.get(), '\n');
  int port = 0;
  if (!served.ok() || fields.size() != 3 || fields[0].empty() ||
      !absl::SimpleAtoi(fields[1], &port)) {
    return absl::UnavailableError(
        absl::StrCat("mpi job store: rank 0 could not serve the store",
                     served.ok() ? " (its error is in its output)"
                                 : absl::StrCat(": ", served.message())));
  }
  // 3. Each rank reaches it, then all agree whether every rank did.
  std::vector<std::string> hosts;
  if (one_host || rank == 0 || host == host0) hosts.push_back("127.0.0.1");
  if (!one_host && rank != 0) {
    for (absl::string_view a :
         absl::StrSplit(fields[2], ',', absl::SkipEmpty())) {
      hosts.emplace_back(a);
    }
  }
  std::vector<std::string> tried;
  absl::StatusOr<std::unique_ptr<TcpStore>> reached =
      Reach(hosts, port, fields[0], Sooner(deadline, absl::Now() + kReachBound),
            &tried);
  MpiBuffer flag(1), flags(static_cast<size_t>(n));
  flag.get()[0] = reached.ok() ? '1' : '0';
  DK_RETURN_IF_ERROR(MpiWorldCollective(
      "the all-gather of who reached the store",
      [&](MPI_Request* r) {
        return mpi.Iallgather(flag.get(), 1, mpi.byte, flags.get(), 1, mpi.byte,
                              mpi.comm_world, r);
      },
      Left(deadline)));
  std::vector<int> unreached;
  for (int r = 0; r < n; ++r) {
    if (flags.get()[r] != '1') unreached.push_back(r);
  }
  if (unreached.empty()) {
    out.store = *std::move(reached);
    out.shared = true;
    out.address = out.store->ServerAddress();
    return out;
  }
  // Some rank reached none: every rank keeps a store of its own.
  out.server.reset();
  out.store = std::make_shared<HashStore>();
  std::fprintf(stderr,
               "distkit: rank %d: rank(s) %s could not reach rank 0's store "
               "over TCP%s%s; each rank uses a store of its own "
               "(torch.distributed.new_group needs a shared one: set "
               "MASTER_ADDR)\n",
               rank, absl::StrJoin(unreached, ", ").c_str(),
               tried.empty() || reached.ok() ? "" : ": ",
               reached.ok() ? "" : absl::StrJoin(tried, "; ").c_str());
  return out;
}

}  // namespace distkit
