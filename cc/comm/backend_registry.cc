#include "cc/comm/backend_registry.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace distkit {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, BackendFactory> factories ABSL_GUARDED_BY(mu);
  std::map<std::string, BackendCanRun> can_run ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

bool RegisterBackend(const std::string& name, BackendFactory factory,
                     BackendCanRun can_run) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.factories[name] = std::move(factory);
  if (can_run) r.can_run[name] = std::move(can_run);
  return true;
}

absl::Status BackendCanRunHere(const std::string& name) {
  BackendCanRun check;
  {
    Registry& r = GetRegistry();
    absl::MutexLock lock(&r.mu);
    if (r.factories.count(name) == 0) {
      return absl::NotFoundError(
          absl::StrCat("backend '", name, "' is not registered"));
    }
    auto it = r.can_run.find(name);
    if (it != r.can_run.end()) check = it->second;
  }
  // Outside the lock: the check may load libraries.
  return check ? check() : absl::OkStatus();
}

const BackendFactory* FindBackend(const std::string& name) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? nullptr : &it->second;
}

std::vector<std::string> RegisteredBackends() {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

}  // namespace distkit
