#include "cc/store/internal/hmac_sha256.h"

#include <string>

#include "absl/strings/escaping.h"
#include "cc/store/internal/handshake.h"
#include "gtest/gtest.h"

namespace distkit {
namespace store_auth {
namespace {

std::string Hex(const std::string& bytes) {
  return absl::BytesToHexString(bytes);
}

// FIPS 180-4's examples (NIST's SHA-256 example values).
TEST(Sha256Test, StandardVectors) {
  EXPECT_EQ(Hex(Sha256Digest("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex(Sha256Digest("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(Sha256Digest(
                "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex(Sha256Digest(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding's boundaries (55/56 bytes: the length fits in
// the last block or needs another), against Python's hashlib.
TEST(Sha256Test, PaddingBoundaries) {
  const std::pair<int, const char*> cases[] = {
      {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
      {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
      {57, "35df609437dcfea3279283ab79fd554e2bf78f8f7ae2de532d8ee300b09e8f73"},
      {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
      {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
      {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
      {119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"},
      {120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"},
      {128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"},
  };
  for (const auto& [n, want] : cases) {
    std::string data;
    for (int i = 0; i < n; ++i)
      data.push_back(static_cast<char>((i * 7 + 3) % 256));
    EXPECT_EQ(Hex(Sha256Digest(data)), want) << n << " bytes";
    // Fed in two pieces at every split: the same digest.
    for (int split = 0; split <= n; ++split) {
      Sha256 h;
      h.Update(absl::string_view(data).substr(0, split));
      h.Update(absl::string_view(data).substr(split));
      const auto d = h.Finish();
      ASSERT_EQ(Hex(std::string(d.begin(), d.end())), want)
          << n << " bytes split at " << split;
    }
  }
}

// RFC 4231's test cases for HMAC-SHA256 (5, a truncated output, left out).
TEST(HmacSha256Test, Rfc4231) {
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(Hex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(Hex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(static_cast<char>(i));
  EXPECT_EQ(Hex(HmacSha256(key4, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Keys longer than a block are hashed first.
  EXPECT_EQ(Hex(HmacSha256(std::string(131, '\xaa'),
                           "Test Using Larger Than Block-Size Key - Hash Key "
                           "First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(
      Hex(HmacSha256(std::string(131, '\xaa'),
                     "This is a test using a larger than block-size key and a "
                     "larger than block-size data. The key needs to be hashed "
                     "before being used by the HMAC algorithm.")),
      "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
  // A key of exactly one block, and the empty key (Python's hmac).
  EXPECT_EQ(Hex(HmacSha256(std::string(64, 'k'), "x")),
            "f91c4c403625fb06910ef93999265bbd2d62baeaec6ff36455498cc124fe3e66");
  EXPECT_EQ(Hex(HmacSha256("", "distkit")),
            "2ba9931224323876e7dd3f8861323c93431b75a4e26d87148a46f6b66b0b4b72");
}

TEST(HandshakeTest, ProofsDependOnTokenRoleAndBothNonces) {
  const std::string sn = NewNonce(), cn = NewNonce();
  EXPECT_EQ(sn.size(), kNonceBytes);
  EXPECT_NE(sn, cn);  // 2^-256 to fail by chance
  const std::string proof = ClientProof("token", sn, cn);
  EXPECT_EQ(proof.size(), kSha256Bytes);
  EXPECT_EQ(proof, ClientProof("token", sn, cn));
  EXPECT_NE(proof, ServerProof("token", sn, cn));  // roles apart
  EXPECT_NE(proof, ClientProof("token2", sn, cn));
  EXPECT_NE(proof, ClientProof("token", NewNonce(), cn));  // no replay
  EXPECT_NE(proof, ClientProof("token", sn, NewNonce()));
  EXPECT_EQ(proof.find("token"), std::string::npos);
  EXPECT_TRUE(ConstantTimeEquals(proof, ClientProof("token", sn, cn)));
  EXPECT_FALSE(ConstantTimeEquals(proof, proof.substr(1)));
}

}  // namespace
}  // namespace store_auth
}  // namespace distkit
