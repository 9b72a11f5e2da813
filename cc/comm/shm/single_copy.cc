#include "cc/comm/shm/single_copy.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace distkit {

absl::Status ReadPeerMemory(int pid, const void* remote, void* local,
                            size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec to = {static_cast<char*>(local) + done, bytes - done};
    iovec from = {const_cast<char*>(static_cast<const char*>(remote)) + done,
                  bytes - done};
    const ssize_t got = process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      // A partial read stops at the first page it cannot read: reading on
      // would only repeat the error, which the next call reports.
      return absl::UnavailableError(absl::StrCat(
          "process_vm_readv of ", bytes - done, " bytes from pid ", pid,
          " failed: ", got < 0 ? std::strerror(errno) : "nothing read"));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

bool SingleCopyAllowed() {
  const char* env = std::getenv("DISTKIT_SHM_SINGLE_COPY");
  return env == nullptr || std::string(env) != "0";
}

}  // namespace distkit
