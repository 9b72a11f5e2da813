#include "cc/comm/gloo/listen_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace distkit {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// "host:port" or "[v6]:port" -> host; a bare host stays as it is.
std::string HostOf(absl::string_view address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    return std::string(address.substr(1, close == absl::string_view::npos
                                             ? absl::string_view::npos
                                             : close - 1));
  }
  const size_t colon = address.rfind(':');
  // More than one colon without brackets: an IPv6 address without a port.
  if (colon == absl::string_view::npos || address.find(':') != colon) {
    return std::string(address);
  }
  return std::string(address.substr(0, colon));
}

// An address that names no interface: a server bound to it listens on all.
bool IsWildcard(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "*";
}

// Text of a socket address; IPv6 link-local ones with their interface.
std::string AddressText(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return text;
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
  std::string s = text;
  if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) && in6->sin6_scope_id != 0) {
    char name[IF_NAMESIZE] = {};
    if (if_indextoname(in6->sin6_scope_id, name) != nullptr) {
      absl::StrAppend(&s, "%", name);
    }
  }
  return s;
}

}  // namespace

absl::StatusOr<std::string> InterfaceAddress(absl::string_view name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::UnavailableError(
        absl::StrCat("getifaddrs: ", std::strerror(errno)));
  }
  std::string v4, v6;
  std::set<std::string> names;
  bool exists = false;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    names.insert(a->ifa_name);
    if (name != a->ifa_name) continue;
    exists = true;
    if (a->ifa_addr == nullptr) continue;
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      v4 = AddressText(a->ifa_addr);
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      v6 = AddressText(a->ifa_addr);
    }
  }
  freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  return absl::NotFoundError(
      absl::StrCat(exists ? "interface " : "no interface named ", name,
                   exists ? " has no IPv4 or IPv6 address" : "",
                   " (this host has: ", absl::StrJoin(names, ", "), ")"));
}

absl::StatusOr<std::string> RouteSourceAddress(absl::string_view host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  const std::string h(host);
  // A numeric address needs no lookup; a name is resolved as connecting to
  // the store resolved it.
  int rc = getaddrinfo(h.c_str(), "9", &hints, &found);
  if (rc != 0) {
    hints.ai_flags = AI_ADDRCONFIG;
    rc = getaddrinfo(h.c_str(), "9", &hints, &found);
  }
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  std::string error = "no address";
  std::string source;
  for (const addrinfo* a = found; a != nullptr && source.empty();
       a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    // A connected UDP socket takes the route's source address; no packet
    // leaves.
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
      error = std::strerror(errno);
    } else {
      source = AddressText(reinterpret_cast<const sockaddr*>(&local));
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (source.empty()) {
    return absl::UnavailableError(
        absl::StrCat("no route to ", host, ": ", error));
  }
  return source;
}

absl::StatusOr<ListenAddress> ChooseListenAddress(
    absl::string_view store_address) {
  if (const char* given = Env("DISTKIT_GLOO_HOSTNAME")) {
    return ListenAddress{given, "DISTKIT_GLOO_HOSTNAME"};
  }
  for (const char* variable : {"DISTKIT_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* value = Env(variable);
    if (value == nullptr) continue;
    // torch's form lists one interface per device; one device here.
    const std::string name(
        *absl::StrSplit(value, ',', absl::SkipWhitespace()).begin());
    absl::StatusOr<std::string> address = InterfaceAddress(name);
    if (!address.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(variable, "=", value, ": ", address.status().message()));
    }
    return ListenAddress{*address, absl::StrCat(variable, "=", name)};
  }
  std::vector<std::pair<std::string, std::string>> targets;
  const std::string store_host = HostOf(store_address);
  if (!IsWildcard(store_host)) {
    targets.push_back(
        {store_host, absl::StrCat("the store at ", store_address)});
  }
  if (const char* master = Env("MASTER_ADDR"); master != nullptr) {
    const std::string host = HostOf(master);
    if (!IsWildcard(host) && host != store_host) {
      targets.push_back({host, absl::StrCat("MASTER_ADDR ", master)});
    }
  }
  if (targets.empty() && store_address.empty()) {
    return ListenAddress{"127.0.0.1", "a job without a store server"};
  }
  std::vector<std::string> failed;
  for (const auto& [host, what] : targets) {
    absl::StatusOr<std::string> source = RouteSourceAddress(host);
    if (source.ok()) {
      return ListenAddress{*source,
                           absl::StrCat("the interface that routes to ", what)};
    }
    failed.push_back(std::string(source.status().message()));
  }
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return ListenAddress{
      name, absl::StrCat("this host's name (",
                         failed.empty() ? "no address to route to"
                                        : absl::StrJoin(failed, "; "),
                         ")")};
}

}  // namespace distkit
