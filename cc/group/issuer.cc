#include "cc/group/issuer.h"

#include <atomic>

namespace distkit {
namespace {

// Threads and NewIssuer() draw from one counter, so no two issuers share a
// number (32 bits: ProcessGroup keeps it beside a count in one word).
std::atomic<uint32_t> next_issuer{1};

thread_local uint32_t scoped_issuer = 0;  // 0: none set

uint32_t Draw() {
  uint32_t n = next_issuer.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = next_issuer.fetch_add(1, std::memory_order_relaxed);
  return n;
}

}  // namespace

uint32_t NewIssuer() { return Draw(); }

uint32_t CurrentIssuer() {
  if (scoped_issuer != 0) return scoped_issuer;
  thread_local const uint32_t own = Draw();
  return own;
}

uint32_t SetIssuer(uint32_t issuer) {
  const uint32_t previous = scoped_issuer;
  scoped_issuer = issuer;
  return previous;
}

IssuerScope::IssuerScope(uint32_t issuer) : previous_(SetIssuer(issuer)) {}

IssuerScope::~IssuerScope() { SetIssuer(previous_); }

}  // namespace distkit
