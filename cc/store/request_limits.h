// What a store request may contain, checked by the client before anything is
// sent and enforced by the server before a request is accepted: keys are
// UTF-8 (the wire format's strings; anything else would fail deep in the RPC
// layer without a reason), and a request's keys and values together stay
// under a size limit, so one bad or hostile request cannot take the store
// host's memory. The limit is DISTKIT_STORE_MAX_REQUEST_BYTES (default
// 256 MiB, far above rendezvous traffic: addresses, small tokens, pickles).

#ifndef DISTKIT_CC_STORE_REQUEST_LIMITS_H_
#define DISTKIT_CC_STORE_REQUEST_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace distkit {

// Default for DISTKIT_STORE_MAX_REQUEST_BYTES.
constexpr size_t kDefaultMaxStoreRequestBytes = size_t{256} << 20;

// Framing headroom of a frame over MaxStoreRequestBytes() (op, lengths,
// counts).
constexpr size_t kStoreFrameOverheadBytes = size_t{1} << 20;

// The most DISTKIT_STORE_MAX_REQUEST_BYTES can be: a frame's length is 32
// bits on the wire (internal/wire.h), and a frame holds a request (or an
// answer) of the limit plus its framing. A larger setting is cut to this,
// with a warning: a longer frame's length would be truncated.
constexpr size_t kMaxStoreRequestBytesSetting =
    size_t{UINT32_MAX} - kStoreFrameOverheadBytes;

// The limit in force (read from the environment once).
size_t MaxStoreRequestBytes();

// The largest frame body either way: the server's cap on requests, and on
// its answers (one large key asked for many times), and the client's cap on
// answers (a broken or hostile server cannot make it allocate without
// bound). At most UINT32_MAX.
size_t MaxStoreFrameBytes();

// INVALID_ARGUMENT naming `op` when `key` is not valid UTF-8.
absl::Status CheckStoreKey(absl::string_view op, absl::string_view key);

// Every key valid, and keys plus `value_bytes` within MaxStoreRequestBytes().
absl::Status CheckStoreRequest(absl::string_view op,
                               absl::Span<const absl::string_view> keys,
                               size_t value_bytes);
absl::Status CheckStoreRequest(absl::string_view op,
                               absl::Span<const std::string> keys,
                               size_t value_bytes);

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_REQUEST_LIMITS_H_
