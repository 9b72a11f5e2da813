// Every backend (gloo, mpi, nccl, the cpu:gloo,cuda:nccl dispatcher)
// registers a factory here from its own library (its *_registration.cc,
// linked with alwayslink), so the process group finds them by name without
// depending on any of them, and a backend built only on some machines (NCCL
// needs CUDA) is simply absent elsewhere.

#ifndef DISTKIT_CC_COMM_BACKEND_REGISTRY_H_
#define DISTKIT_CC_COMM_BACKEND_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cc/comm/backend.h"
#include "cc/comm/rank_names.h"
#include "cc/store/store.h"

namespace distkit {

struct BackendConfig {
  std::shared_ptr<Store> store;  // private to the group
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // picks the CUDA device
  // For TCP transports: where peers reach this rank; empty: chosen by the
  // transport (cc/comm/gloo/listen_address.h).
  std::string hostname;
  absl::Duration timeout = absl::Minutes(30);
  // How messages name this backend's ranks (rank_names.h).
  RankNames names;
};

using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Backend>>(
    const BackendConfig&)>;

// Whether this process can run the backend at all (a GPU, a library that
// loads), answered locally in milliseconds so that init can refuse before
// any rank connects to the others.
using BackendCanRun = std::function<absl::Status()>;

// Returns true so it can initialize a static: `static bool r = Register...`.
// `can_run` may be empty: the backend can always run where it was built.
bool RegisterBackend(const std::string& name, BackendFactory factory,
                     BackendCanRun can_run = nullptr);
// nullptr if no backend of that name was built into this binary.
const BackendFactory* FindBackend(const std::string& name);
// OK when `name` is registered and its can_run check passes; NOT_FOUND when
// it is not registered; else can_run's error.
absl::Status BackendCanRunHere(const std::string& name);
std::vector<std::string> RegisteredBackends();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_BACKEND_REGISTRY_H_
