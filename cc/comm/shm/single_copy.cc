#include "cc/comm/shm/single_copy.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace distkit {

namespace {

// One direction of cross-memory attach, repeated over partial transfers.
absl::Status Transfer(bool write, int pid, char* remote, char* local,
                      size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec here = {local + done, bytes - done};
    iovec there = {remote + done, bytes - done};
    const ssize_t got = write ? process_vm_writev(pid, &here, 1, &there, 1, 0)
                              : process_vm_readv(pid, &here, 1, &there, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      // A partial transfer stops at the first page it cannot reach: going on
      // would only repeat the error, which the next call reports.
      return absl::UnavailableError(absl::StrCat(
          write ? "process_vm_writev" : "process_vm_readv", " of ",
          bytes - done, " bytes ", write ? "to" : "from", " pid ", pid,
          " failed: ", got < 0 ? std::strerror(errno) : "nothing moved"));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadPeerMemory(int pid, const void* remote, void* local,
                            size_t bytes) {
  return Transfer(/*write=*/false, pid,
                  const_cast<char*>(static_cast<const char*>(remote)),
                  static_cast<char*>(local), bytes);
}

absl::Status WritePeerMemory(int pid, void* remote, const void* local,
                             size_t bytes) {
  // process_vm_writev only reads the local buffer.
  return Transfer(/*write=*/true, pid, static_cast<char*>(remote),
                  const_cast<char*>(static_cast<const char*>(local)), bytes);
}

bool SingleCopyAllowed() {
  const char* env = std::getenv("DISTKIT_SHM_SINGLE_COPY");
  return env == nullptr || std::string(env) != "0";
}

}  // namespace distkit
