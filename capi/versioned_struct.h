// Reading a size-versioned config struct from the C ABI (header rule 8).
//
// One rule for every dk_X_config_t. The caller's struct_size says which
// version of the struct it was compiled against:
//  - an older, smaller struct is accepted: the fields it has are read, the
//    fields appended since keep dk_X_config_init's defaults;
//  - a newer, larger struct is accepted when every byte this library does not
//    know is zero (the rule of Linux's copy_struct_from_user), so a caller is
//    refused only for asking for something this library cannot do;
//  - a struct_size that ends inside a field, or is smaller than struct_size
//    itself, is INVALID_ARGUMENT.
// A NULL config means "all defaults".

#ifndef DISTKIT_CAPI_VERSIONED_STRUCT_H_
#define DISTKIT_CAPI_VERSIONED_STRUCT_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace distkit {
namespace capi {

// Where one field of a config struct lies.
struct FieldSpan {
  size_t offset;
  size_t size;
};

#define DK_FIELD_SPAN(Struct, field) \
  ::distkit::capi::FieldSpan { offsetof(Struct, field), sizeof(Struct::field) }

// The start of every dk_X_config_init: false for a NULL `config` (nothing
// to fill), else the struct zeroed with its struct_size set, for the caller
// to set the non-zero defaults.
template <typename Config>
bool ResetVersionedStruct(Config* config) {
  if (config == nullptr) return false;
  std::memset(config, 0, sizeof(*config));
  config->struct_size = sizeof(*config);
  return true;
}

// `init` fills the defaults; `name` is the struct's C name without "_t"
// ("dk_store_config"), for errors; `fields` lists every field of the newest
// version.
template <typename Config>
absl::StatusOr<Config> ReadVersionedStruct(
    const Config* config, void (*init)(Config*), const char* name,
    std::initializer_list<FieldSpan> fields) {
  Config out;
  init(&out);
  if (config == nullptr) return out;
  const size_t size = config->struct_size;
  const std::string type_name = absl::StrCat(name, "_t");
  const std::string call_init = absl::StrCat(" (call ", name, "_init)");
  if (size < sizeof(size_t)) {
    return absl::InvalidArgumentError(absl::StrCat("config: struct_size ", size,
                                                   " is too small for any ",
                                                   type_name, call_init));
  }
  for (const FieldSpan& f : fields) {
    if (f.offset < size && size < f.offset + f.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: struct_size ", size, " ends inside a field of ",
                       type_name, call_init));
    }
  }
  if (size > sizeof(Config)) {
    const unsigned char* tail =
        reinterpret_cast<const unsigned char*>(config) + sizeof(Config);
    if (std::any_of(tail, tail + (size - sizeof(Config)),
                    [](unsigned char b) { return b != 0; })) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: this ", type_name, " (", size,
          " bytes) sets fields this library does not know (it knows ",
          sizeof(Config), " bytes); upgrade the library"));
    }
  }
  std::memcpy(&out, config, std::min(size, sizeof(Config)));
  out.struct_size = sizeof(Config);
  return out;
}

}  // namespace capi
}  // namespace distkit

#endif  // DISTKIT_CAPI_VERSIONED_STRUCT_H_
