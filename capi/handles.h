// The handle structs behind the ABI's opaque types that several sections
// share (store, group, work), and how a group argument is resolved. Handles
// only one section uses are defined in that section's file.

#ifndef DISTKIT_CAPI_HANDLES_H_
#define DISTKIT_CAPI_HANDLES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cc/comm/work.h"
#include "cc/group/process_group.h"
#include "cc/store/store.h"
#include "cc/store/store_server.h"
#include "distkit/distkit.h"

struct dk_store {
  std::shared_ptr<distkit::Store> rep;
  std::unique_ptr<distkit::StoreServer> server;  // set by dk_store_serve
  std::string address;
};

struct dk_group {
  std::shared_ptr<distkit::ProcessGroup> rep;
  bool destroyed = false;
};

struct dk_work {
  std::shared_ptr<distkit::Work> rep;
  // The group stays alive while its work is referenced.
  std::shared_ptr<distkit::ProcessGroup> group;
};

namespace distkit {
namespace capi {

// The group an argument names: itself, or the default group for NULL.
absl::StatusOr<std::shared_ptr<ProcessGroup>> GroupOf(dk_group_t* group);

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_HANDLES_H_
