// How a store connection proves it knows the job token without sending it
// (docs/architecture.md, "Store and launch"). Three messages, both sides
// proving, with fresh nonces:
//
//   client -> server  hello:     magic, client nonce
//   server -> client  challenge: magic, server nonce, ServerProof
//   client -> server  proof:     ClientProof       (then its requests)
//
//   ServerProof = HMAC-SHA256(token, "distkit store server" 0 sn cn)
//   ClientProof = HMAC-SHA256(token, "distkit store client" 0 sn cn)
//
// Neither message holds the token or anything it can be read back from, and
// a proof is good only for the server nonce of its own connection: a
// recorded hello and proof sent on another connection meet another nonce and
// are refused. The client checks the server's proof before it sends its own,
// so a server that does not know the token (another job's, an impostor)
// learns nothing and is told nothing. What follows the handshake is neither
// encrypted nor authenticated: someone who can change the traffic in flight
// can still take over a connection once it is open.

#ifndef DISTKIT_CC_STORE_INTERNAL_HANDSHAKE_H_
#define DISTKIT_CC_STORE_INTERNAL_HANDSHAKE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace distkit {
namespace store_auth {

constexpr size_t kNonceBytes = 32;

// kNonceBytes from the kernel's random source (getrandom, else
// /dev/urandom); aborts the process if neither answers, which no Linux
// since 3.17 does.
std::string NewNonce();

std::string ServerProof(absl::string_view token, absl::string_view server_nonce,
                        absl::string_view client_nonce);
std::string ClientProof(absl::string_view token, absl::string_view server_nonce,
                        absl::string_view client_nonce);

// Equal contents, in time that depends on the lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace store_auth
}  // namespace distkit

#endif  // DISTKIT_CC_STORE_INTERNAL_HANDSHAKE_H_
