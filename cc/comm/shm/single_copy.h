// Single-copy transfers between the ranks of one host (Linux cross-memory
// attach): a rank reads a peer's buffer straight into its own with
// process_vm_readv, or writes its own into a peer's with process_vm_writev,
// where the shared-memory slots cost two copies (the peer into its slot, the
// rank out of it). The kernel allows it between
// processes of one user unless a policy refuses (Yama's ptrace_scope,
// seccomp, a non-dumpable process); ShmBackend probes once per group and
// keeps its slots when any rank is refused. DISTKIT_SHM_SINGLE_COPY=0 turns
// it off.

#ifndef DISTKIT_CC_COMM_SHM_SINGLE_COPY_H_
#define DISTKIT_CC_COMM_SHM_SINGLE_COPY_H_

#include <cstddef>

#include "absl/status/status.h"

namespace distkit {

// Copies `bytes` at `remote` in process `pid` to `local`. UNAVAILABLE with
// the system's reason when the kernel refuses or the process is gone.
absl::Status ReadPeerMemory(int pid, const void* remote, void* local,
                            size_t bytes);

// Copies `bytes` at `local` to `remote` in process `pid`; the same errors.
absl::Status WritePeerMemory(int pid, void* remote, const void* local,
                             size_t bytes);

// False when DISTKIT_SHM_SINGLE_COPY=0.
bool SingleCopyAllowed();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SINGLE_COPY_H_
