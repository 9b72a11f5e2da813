// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the store's
// handshake (handshake.h): small, dependency-free, and checked against the
// standards' test vectors (hmac_sha256_test.cc). Not a general crypto
// library: no other use is intended.

#ifndef DISTKIT_CC_STORE_INTERNAL_HMAC_SHA256_H_
#define DISTKIT_CC_STORE_INTERNAL_HMAC_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace distkit {
namespace store_auth {

constexpr size_t kSha256Bytes = 32;

class Sha256 {
 public:
  Sha256();
  void Update(absl::string_view data);
  // The digest of everything updated so far; the object is spent after.
  std::array<uint8_t, kSha256Bytes> Finish();

 private:
  void Block(const uint8_t* block);

  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// The digest as 32 raw bytes.
std::string Sha256Digest(absl::string_view data);
std::string HmacSha256(absl::string_view key, absl::string_view message);

}  // namespace store_auth
}  // namespace distkit

#endif  // DISTKIT_CC_STORE_INTERNAL_HMAC_SHA256_H_
