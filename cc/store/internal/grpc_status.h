// File: internal/grpc_status.h
//
// Conversions between absl::Status and grpc::Status. Both use the google.rpc
// numbering, so codes convert by identity.

#ifndef DISTKIT_CC_STORE_INTERNAL_GRPC_STATUS_H_
#define DISTKIT_CC_STORE_INTERNAL_GRPC_STATUS_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace distkit {
namespace store_internal {

// The metadata entry that carries the job token.
inline constexpr char kTokenMetadataKey[] = "distkit-token";

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace store_internal
}  // namespace distkit

#endif  // DISTKIT_CC_STORE_INTERNAL_GRPC_STATUS_H_
