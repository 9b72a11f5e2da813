// The C ABI, section "Issuers": which issuer a thread's calls count as, for
// the rule that a group's collectives come from one issuer at a time
// (convention 13; cc/group/issuer.h).

#include "capi/entry_point.h"
#include "cc/group/issuer.h"
#include "distkit/distkit.h"

extern "C" {

uint32_t dk_issuer_new(void) { return distkit::NewIssuer(); }

uint32_t dk_issuer_set(uint32_t issuer) { return distkit::SetIssuer(issuer); }

}  // extern "C"
