#include "cc/store/request_limits.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace distkit {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const unsigned char c = s[i];
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const unsigned char cc = s[i + k];
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are invalid.
  static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return n;
}

}  // namespace

size_t MaxStoreRequestBytes() {
  static const size_t limit = [] {
    const char* env = std::getenv("DISTKIT_STORE_MAX_REQUEST_BYTES");
    uint64_t v = 0;
    if (env == nullptr || !absl::SimpleAtoi(env, &v) || v == 0) {
      return kDefaultMaxStoreRequestBytes;
    }
    if (v > kMaxStoreRequestBytesSetting) {
      std::fprintf(stderr,
                   "distkit: DISTKIT_STORE_MAX_REQUEST_BYTES=%s is over the "
                   "most a store frame can carry (frame lengths are 32-bit); "
                   "using %zu\n",
                   env, kMaxStoreRequestBytesSetting);
      return kMaxStoreRequestBytesSetting;
    }
    return size_t{v};
  }();
  return limit;
}

size_t MaxStoreFrameBytes() {
  return MaxStoreRequestBytes() + kStoreFrameOverheadBytes;
}

absl::Status CheckStoreKey(absl::string_view op, absl::string_view key) {
  for (size_t i = 0; i < key.size();) {
    const size_t n = Utf8SequenceLength(key, i);
    if (n == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("store: ", op, ": key \"", absl::CHexEscape(key),
                       "\" is not valid UTF-8 (byte ", i, "); keys are text"));
    }
    i += n;
  }
  return absl::OkStatus();
}

absl::Status CheckStoreRequest(absl::string_view op,
                               absl::Span<const absl::string_view> keys,
                               size_t value_bytes) {
  size_t bytes = value_bytes;
  for (absl::string_view k : keys) {
    if (absl::Status s = CheckStoreKey(op, k); !s.ok()) return s;
    bytes += k.size();
  }
  if (value_bytes > MaxStoreRequestBytes() || bytes > MaxStoreRequestBytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store: ", op, ": the request holds ", bytes, " byte(s) (",
        bytes - value_bytes, " of keys, ", value_bytes,
        " of values), over the store's limit of ", MaxStoreRequestBytes(),
        " (DISTKIT_STORE_MAX_REQUEST_BYTES)"));
  }
  return absl::OkStatus();
}

absl::Status CheckStoreRequest(absl::string_view op,
                               absl::Span<const std::string> keys,
                               size_t value_bytes) {
  std::vector<absl::string_view> views(keys.begin(), keys.end());
  return CheckStoreRequest(op, views, value_bytes);
}

}  // namespace distkit
