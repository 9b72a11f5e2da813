#include "cc/store/internal/handshake.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "cc/store/internal/hmac_sha256.h"

namespace distkit {
namespace store_auth {
namespace {

bool FillFromUrandom(char* out, size_t n) {
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < n) {
    const ssize_t got = read(fd, out + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  close(fd);
  return done == n;
}

// The role's label, a separator, then the two fixed-length nonces: the
// message is unambiguous, and a proof of one role is never the other's.
std::string Proof(absl::string_view role, absl::string_view token,
                  absl::string_view server_nonce,
                  absl::string_view client_nonce) {
  return HmacSha256(
      token, absl::StrCat("distkit store ", role, absl::string_view("\0", 1),
                          server_nonce, client_nonce));
}

}  // namespace

std::string NewNonce() {
  std::string nonce(kNonceBytes, '\0');
  size_t done = 0;
  while (done < nonce.size()) {
    const ssize_t got = getrandom(nonce.data() + done, nonce.size() - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      if (FillFromUrandom(nonce.data(), nonce.size())) return nonce;
      fprintf(stderr, "distkit: no random source for the store's nonces\n");
      abort();
    }
    done += static_cast<size_t>(got);
  }
  return nonce;
}

std::string ServerProof(absl::string_view token, absl::string_view server_nonce,
                        absl::string_view client_nonce) {
  return Proof("server", token, server_nonce, client_nonce);
}

std::string ClientProof(absl::string_view token, absl::string_view server_nonce,
                        absl::string_view client_nonce) {
  return Proof("client", token, server_nonce, client_nonce);
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace store_auth
}  // namespace distkit
