#include "cc/comm/backend_registry.h"

#include <map>

#include "absl/synchronization/mutex.h"

namespace distkit {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, BackendFactory> factories ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

bool RegisterBackend(const std::string& name, BackendFactory factory) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.factories[name] = std::move(factory);
  return true;
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
