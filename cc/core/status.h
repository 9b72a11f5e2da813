// Status helpers shared by every distkit layer. The core reports errors as
// absl::Status with the google.rpc code numbering, which the C ABI passes
// through unchanged as dk_status_t (DK_OK = 0 ... DK_UNAUTHENTICATED = 16).
//
//   absl::StatusOr<int> ParseRank(absl::string_view s);
//   absl::Status Init() {
//     DK_ASSIGN_OR_RETURN(int rank, ParseRank(env));
//     DK_RETURN_IF_ERROR(Connect(rank));
//     return absl::OkStatus();
//   }

#ifndef DISTKIT_CC_CORE_STATUS_H_
#define DISTKIT_CC_CORE_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define DK_RETURN_IF_ERROR(expr)                       \
  do {                                                 \
    const ::absl::Status dk_status_internal_ = (expr); \
    if (!dk_status_internal_.ok()) {                   \
      return dk_status_internal_;                      \
    }                                                  \
  } while (0)

#define DK_STATUS_CONCAT_INNER_(a, b) a##b
#define DK_STATUS_CONCAT_(a, b) DK_STATUS_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status, else
// moves the value into `lhs` (which may be a declaration).
#define DK_ASSIGN_OR_RETURN(lhs, rexpr)                                     \
  DK_ASSIGN_OR_RETURN_IMPL_(DK_STATUS_CONCAT_(dk_statusor_, __LINE__), lhs, \
                            rexpr)

#define DK_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) {                                 \
    return std::move(statusor).status();                \
  }                                                     \
  lhs = std::move(statusor).value()

namespace distkit {

// Returns `status` with "`context`: " put in front of its message; OK stays OK.
// Used to say where an error happened (op, rank, group) as it travels up.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

// The canonical upper-case name of a code ("DEADLINE_EXCEEDED"), for messages.
absl::string_view StatusCodeName(absl::StatusCode code);

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_STATUS_H_
