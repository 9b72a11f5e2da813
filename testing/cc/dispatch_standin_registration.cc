// Test only: registers "cpu:gloo,cuda:gloo_standin", the device dispatcher of
// "cpu:gloo,cuda:nccl" with a second Gloo backend standing in for NCCL, so
// the dispatcher's routing of the contract (signature exchange, metadata,
// reductions) is tested on machines without GPUs.
#include <memory>

#include "cc/comm/backend_registry.h"
#include "cc/comm/device_dispatch_backend.h"
#include "cc/comm/gloo/gloo_backend.h"
#include "cc/core/status.h"
#include "cc/store/prefix_store.h"

namespace distkit {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> MakeStandIn(
    const BackendConfig& config) {
  BackendConfig cpu = config;
  cpu.store = std::make_shared<PrefixStore>("gloo", config.store);
  DK_ASSIGN_OR_RETURN(std::unique_ptr<GlooBackend> a, GlooBackend::Create(cpu));
  BackendConfig standin = config;
  standin.store = std::make_shared<PrefixStore>("standin", config.store);
  DK_ASSIGN_OR_RETURN(std::unique_ptr<GlooBackend> b,
                      GlooBackend::Create(standin));
  return std::unique_ptr<Backend>(new DeviceDispatchBackend(
      "cpu:gloo,cuda:gloo_standin", std::move(a), std::move(b)));
}

const bool registered =
    RegisterBackend("cpu:gloo,cuda:gloo_standin", MakeStandIn);

}  // namespace
}  // namespace distkit
