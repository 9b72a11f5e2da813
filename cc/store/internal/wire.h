// The store's wire format, shared by TcpStore (the client) and StoreServer.
// A connection carries frames in both directions:
//
//   frame    = u32 body_length (little-endian) | body
//              (so DISTKIT_STORE_MAX_REQUEST_BYTES is capped: request_limits.h)
//   request  = u8 op | fields of that op (below)
//   response = u8 code (absl::StatusCode) | payload when code is OK,
//              otherwise string message
//   string   = u32 length | bytes          keys = u32 count | count × string
//
//   op          fields                                 payload of the answer
//   kHello      u32 kMagic, string client_nonce        u32 kMagic,
//                                                      string server_nonce,
//                                                      string server_proof
//   kProof      string client_proof                    (none)
//   kSet        string key, string value               no answer at all
//   kAdd        string key, i64 delta                  i64 new value
//   kCompareSet string key, expected, desired          string value
//   kWait       keys, i64 timeout_ms, u8 try_only      (none)
//   kCheck      keys                                   u8 ready
//   kDeleteKey  string key                             u8 deleted
//   kNumKeys    (none)                                 i64 count
//   kMultiGet   keys, i64 timeout_ms, u8 try_only      u32 count × string
//   kMultiSet   keys, keys (the values)                (none)
//   kAppend     string key, string value               (none)
//
// A connection opens with kHello and kProof, the handshake of handshake.h:
// each side proves it knows the job token with an HMAC over both sides'
// fresh nonces, and the token itself never crosses the network. The server
// reads nothing else before the proof, caps those frames at kMaxHelloBytes
// (and reads no more than one such frame at a time), and closes a connection
// whose handshake has not ended within its handshake timeout (10 s by
// default), so a client without the token costs the store host almost
// nothing and holds no descriptor for long; a client sends its proof (and its
// requests after it) only once the server has proved itself. Requests of
// one connection are applied in order. A set gets no answer (as c10d's
// TCPStore's does not): the server answers only when it refuses one, and then
// closes the connection. A blocking request with try_only set answers
// kNotReadyCode at once instead of waiting, so the client can park the wait on
// a connection of its own.

#ifndef DISTKIT_CC_STORE_INTERNAL_WIRE_H_
#define DISTKIT_CC_STORE_INTERNAL_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace distkit {
namespace store_wire {

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kAdd = 3,
  kCompareSet = 4,
  kWait = 5,
  kCheck = 6,
  kDeleteKey = 7,
  kNumKeys = 8,
  kMultiGet = 9,
  kMultiSet = 10,
  kAppend = 11,
  kProof = 12,
};

// "DKS2": the protocol and its version, first in every hello and challenge
// (DKS1 sent the token itself).
constexpr uint32_t kMagic = 0x32534b44;
// The most a frame may hold before the connection has shown the token.
constexpr size_t kMaxHelloBytes = 4096;
// The answer code of a try_only request whose keys are not all there yet.
constexpr uint8_t kNotReadyCode = 0xff;
constexpr size_t kHeaderBytes = 4;

// The op's name as error messages and the flight recorder spell it.
absl::string_view OpName(Op op);

// A decoded request. Fields an op does not use stay empty / zero.
struct Request {
  Op op = Op::kNumKeys;
  std::vector<std::string> keys;    // one key for single-key ops
  std::vector<std::string> values;  // value / expected+desired / multi_set
  int64_t number = 0;               // add's delta, a wait's timeout_ms
  uint32_t magic = 0;               // hello (values: the client's nonce;
                                    // proof's: the client's proof)
  bool try_only = false;
};

// Appends one framed request to `out`. `keys` and `values` as in Request.
void EncodeRequest(const Request& request, std::string* out);

// The frame of a set, written straight into `out` (replacing its contents):
// the hot path of rendezvous traffic, without a Request in between.
void EncodeSet(absl::string_view key, absl::string_view value,
               std::string* out);

// Decodes one request body (without its length header). INVALID_ARGUMENT
// naming what is wrong for a body that is truncated, has trailing bytes or an
// unknown op.
absl::StatusOr<Request> DecodeRequest(absl::string_view body);

// Response writing: Begin reserves the header and writes the code, the
// Put* append payload, End fills the length in.
size_t BeginFrame(std::string* out, uint8_t code);
void EndFrame(std::string* out, size_t begin);
void PutU8(std::string* out, uint8_t v);
void PutI64(std::string* out, int64_t v);
void PutU32(std::string* out, uint32_t v);
void PutString(std::string* out, absl::string_view s);
// A whole error answer: code and message.
void EncodeError(const absl::Status& status, std::string* out);

// Reads fields of a response payload in order; any read past the end marks
// the reader bad (and returns zero / empty).
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  uint8_t U8();
  uint32_t U32();
  int64_t I64();
  std::string String();
  bool ok() const { return ok_; }
  bool done() const { return ok_ && data_.empty(); }
  void Fail() { ok_ = false; }

 private:
  bool Take(size_t n, absl::string_view* out);
  absl::string_view data_;
  bool ok_ = true;
};

// The body length in a frame header (4 bytes, little-endian).
uint32_t FrameLength(const char* header);

}  // namespace store_wire
}  // namespace distkit

#endif  // DISTKIT_CC_STORE_INTERNAL_WIRE_H_
