// Registers "nccl" and "cpu:gloo,cuda:nccl" with the backend registry, so the
// process group finds them in builds that have CUDA's headers (this library
// is linked only then); CanRun tells init, before any rank connects, whether
// this machine can run them.
#include <memory>

#include "absl/strings/str_cat.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/device_dispatch_backend.h"
#include "cc/comm/gloo/gloo_backend.h"
#include "cc/comm/nccl/nccl_backend.h"
#include "cc/core/status.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeNccl(const BackendConfig& config) {
  DK_ASSIGN_OR_RETURN(std::unique_ptr<NcclBackend> b,
                      NcclBackend::Create(config));
  return std::unique_ptr<Backend>(std::move(b));
}

absl::StatusOr<std::unique_ptr<Backend>> MakeDispatch(
    const BackendConfig& config) {
  BackendConfig nccl = config;
  nccl.store = std::make_shared<PrefixStore>("nccl", config.store);
  DK_ASSIGN_OR_RETURN(std::unique_ptr<NcclBackend> cuda,
                      NcclBackend::Create(nccl));
  BackendConfig gloo = config;
  gloo.store = std::make_shared<PrefixStore>("gloo", config.store);
  DK_ASSIGN_OR_RETURN(std::unique_ptr<GlooBackend> cpu,
                      GlooBackend::Create(gloo));
  return std::unique_ptr<Backend>(new DeviceDispatchBackend(
      "cpu:gloo,cuda:nccl", std::move(cpu), std::move(cuda)));
}

const bool registered =
    RegisterBackend("nccl", MakeNccl, NcclBackend::CanRun) &&
    RegisterBackend("cpu:gloo,cuda:nccl", MakeDispatch, NcclBackend::CanRun);

}  // namespace
}  // namespace distkit
