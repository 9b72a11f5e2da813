// Who issues a group's collectives, for ProcessGroup's rule that they come
// from one issuer at a time (process_group.h, "Threads"): a collective issued
// while another issuer's are in flight is refused, since it could be paired
// with a different call on another rank.
//
// By default the issuer is the calling OS thread. Code whose one sequence of
// calls runs on several threads, in an order it fixes itself, names one
// issuer for all of them with an IssuerScope:
// - the gradient reducer and FSDP's runtime: an iteration's buckets and
//   units are launched from autograd's hooks, which for CUDA tensors run on
//   the device's own thread, while the iteration was started (and its
//   leftovers launched) on the thread that called backward;
// - the Go binding (through the C ABI's dk_issuer_*): a goroutine moves
//   between OS threads whenever it blocks, so its calls on a group carry the
//   group's issuer, and the binding refuses overlapping calls itself.

#ifndef DISTKIT_CC_GROUP_ISSUER_H_
#define DISTKIT_CC_GROUP_ISSUER_H_

#include <cstdint>

namespace distkit {

// A new issuer, which no thread and no other NewIssuer() call has. Never 0.
uint32_t NewIssuer();

// The calling thread's issuer: the innermost IssuerScope's, else the
// thread's own (a number unique in the process, given at its first call).
uint32_t CurrentIssuer();

// Makes the calling thread issue as `issuer` until the scope ends (0: as the
// thread itself). Scopes nest; each restores the issuer it found.
class IssuerScope {
 public:
  explicit IssuerScope(uint32_t issuer);
  ~IssuerScope();
  IssuerScope(const IssuerScope&) = delete;
  IssuerScope& operator=(const IssuerScope&) = delete;

 private:
  uint32_t previous_;
};

// The C ABI's form (dk_issuer_set): sets the calling thread's issuer (0: the
// thread itself) and returns the one it replaces.
uint32_t SetIssuer(uint32_t issuer);

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_ISSUER_H_
