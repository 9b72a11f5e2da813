// The address other ranks reach this rank's Gloo device at, found without
// name lookups. Binding to what gethostname() resolves to fails wherever DNS
// or /etc/hosts do not map the host's name to the interface its peers use
// (containers, network namespaces, clusters with a management network):
// Gloo then says "Unable to find address for: <hostname>" or listens where
// nobody can reach it. In order:
//
//  1. $DISTKIT_GLOO_HOSTNAME: as given (an address, or a name Gloo resolves).
//  2. $DISTKIT_SOCKET_IFNAME, else torch's $GLOO_SOCKET_IFNAME (its first name
//     when it lists several): that interface's address, IPv4 before IPv6.
//     An interface that does not exist or has no address is an error naming
//     the interfaces there are.
//  3. The address the kernel would send from to the store's host (a UDP
//     socket connected there; nothing is sent), or when the store is an
//     in-process one or listens on a wildcard address, to $MASTER_ADDR's:
//     the peers reach the store over the same network, so they reach this
//     interface. A store on loopback gives 127.0.0.1 (a one-host job).
//  4. No store address and no MASTER_ADDR (a job of one process): 127.0.0.1.
//  5. Last resort, when nothing routes there: this host's name, which Gloo
//     then resolves.

#ifndef DISTKIT_CC_COMM_GLOO_LISTEN_ADDRESS_H_
#define DISTKIT_CC_COMM_GLOO_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distkit {

struct ListenAddress {
  std::string address;  // what Gloo binds and publishes
  std::string reason;   // how it was chosen, for messages
};

// `store_address` is the job store's "host:port" ("[v6]:port"), empty for an
// in-process store.
absl::StatusOr<ListenAddress> ChooseListenAddress(
    absl::string_view store_address);

// The first address of interface `name` (IPv4 before IPv6; a link-local
// IPv6 address carries its "%name" scope). NOT_FOUND naming the interfaces
// there are when it does not exist or has no address.
absl::StatusOr<std::string> InterfaceAddress(absl::string_view name);

// The source address of the route to `host` (a numeric address, or a name
// resolved as connecting to it would). UNAVAILABLE when nothing routes there.
absl::StatusOr<std::string> RouteSourceAddress(absl::string_view host);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_GLOO_LISTEN_ADDRESS_H_
