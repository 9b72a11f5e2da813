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

// The size of a struct as it was when `last` was its last field: what the
// dk_X_init symbols without a size write (see InitVersionedStruct).
#define DK_SIZE_THROUGH(Struct, last) \
  (offsetof(Struct, last) + sizeof(Struct::last))

// This library's struct, zeroed, with `defaults` (the non-zero ones) set.
template <typename Config>
Config DefaultVersionedStruct(void (*defaults)(Config*)) {
  Config full;
  std::memset(&full, 0, sizeof(full));
  full.struct_size = sizeof(full);
  defaults(&full);
  return full;
}

// The body of every dk_X_init: fills the caller's struct of `size` bytes
// (the struct as the caller's header declared it) with the defaults and
// struct_size = size. A caller built against an older header, whose struct
// is smaller, gets the fields it has and no byte past its end; a newer one
// gets zeros in the fields this library does not know (which it then
// accepts, as ReadVersionedStruct does). The symbols without a size
// (dk_X_init(config)) pass the size of their struct as ABI 0.12 declared it,
// for the binaries built before the sized calls existed, and never more:
// when a struct grows, code must call dk_X_init_sized.
template <typename Config>
void InitVersionedStruct(Config* config, size_t size,
                         void (*defaults)(Config*)) {
  if (config == nullptr || size < sizeof(size_t)) return;
  const Config full = DefaultVersionedStruct(defaults);
  std::memcpy(config, &full, std::min(size, sizeof(full)));
  if (size > sizeof(full)) {
    std::memset(reinterpret_cast<unsigned char*>(config) + sizeof(full), 0,
                size - sizeof(full));
  }
  config->struct_size = size;
}

// `defaults` sets the non-zero defaults (on a zeroed struct); `name` is the
// struct's C name without "_t" ("dk_store_config"), for errors; `fields`
// lists every field of the newest version.
template <typename Config>
absl::StatusOr<Config> ReadVersionedStruct(
    const Config* config, void (*defaults)(Config*), const char* name,
    std::initializer_list<FieldSpan> fields) {
  Config out = DefaultVersionedStruct(defaults);
  if (config == nullptr) return out;
  const size_t size = config->struct_size;
  const std::string type_name = absl::StrCat(name, "_t");
  const std::string call_init = absl::StrCat(" (call ", name, "_init_sized)");
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
