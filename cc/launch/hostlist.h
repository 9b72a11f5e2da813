// Expands Slurm's compressed hostlist syntax natively, so no `scontrol` is
// needed: "node[01-03,07]" -> node01 node02 node03 node07;
// "a1,b[2-3]" -> a1 b2 b3; "r[1-2]-n[1-2]" -> r1-n1 r1-n2 r2-n1 r2-n2.
// Zero padding follows the range's lower bound, as Slurm does.

#ifndef DISTKIT_CC_LAUNCH_HOSTLIST_H_
#define DISTKIT_CC_LAUNCH_HOSTLIST_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distkit {

// INVALID_ARGUMENT (quoting the text) on unbalanced brackets, empty names,
// reversed or non-numeric ranges, or more than 1,000,000 hosts.
absl::StatusOr<std::vector<std::string>> ExpandHostlist(absl::string_view text);

}  // namespace distkit

#endif  // DISTKIT_CC_LAUNCH_HOSTLIST_H_
