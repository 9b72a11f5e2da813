// Bytes crossing the ABI: memory handed to the caller (malloc'd, freed with
// dk_free) and dk_bytes_t arrays read from the caller.

#ifndef DISTKIT_CAPI_CALLER_MEMORY_H_
#define DISTKIT_CAPI_CALLER_MEMORY_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "distkit/distkit.h"

namespace distkit {
namespace capi {

// A malloc'd copy of `bytes` with a '\0' after them, so that a value is also
// a C string.
absl::StatusOr<char*> OwnedCopy(absl::string_view bytes);

// `bytes` as an owned copy in *data_out, its length in *size_out.
absl::Status ReturnBytes(absl::string_view bytes, void** data_out,
                         size_t* size_out);

// `items` as one malloc block: the dk_bytes_t array, then every item's bytes.
absl::Status ReturnItems(const std::vector<std::string>& items,
                         dk_bytes_t** items_out, size_t* count_out);

// The same for a list only some ranks receive: without one, the outs stay
// as CheckOuts left them (NULL / 0).
absl::Status ReturnItems(const std::optional<std::vector<std::string>>& items,
                         dk_bytes_t** items_out, size_t* count_out);

// The caller's `count` items (named "<what>[k]" in errors), copied.
absl::StatusOr<std::vector<std::string>> ReadItems(const dk_bytes_t* items,
                                                   size_t count,
                                                   const char* what);

// The out-parameters of a returned item list: checked, then cleared so that
// a call that returns no list leaves NULL / 0.
absl::Status CheckOuts(dk_bytes_t** items_out, size_t* count_out);

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_CALLER_MEMORY_H_
