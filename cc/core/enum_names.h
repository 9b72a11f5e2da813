// EnumName: one table per enum from which its names are both printed and
// parsed (DataTypeName / ParseDataType, ReduceOpName, OpCodeName, the
// launcher, sharding strategy and store wire names), so that a name and its
// parse cannot drift apart and no switch repeats the enumerators.
//
//   constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, ...};
//   NameIn(kColorNames, Color::kRed, "invalid")   // "red"
//   ValueIn(kColorNames, "red")                   // Color::kRed

#ifndef DISTKIT_CC_CORE_ENUM_NAMES_H_
#define DISTKIT_CC_CORE_ENUM_NAMES_H_

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace distkit {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` in `table`; `unknown` where the table lacks it (a value
// cast from an integer no enumerator has).
template <typename E, size_t N>
constexpr const char* NameIn(const EnumName<E> (&table)[N], E value,
                             const char* unknown) {
  for (const EnumName<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return unknown;
}

// The value named `name` in `table` (exact, case-sensitive match).
template <typename E, size_t N>
constexpr std::optional<E> ValueIn(const EnumName<E> (&table)[N],
                                   absl::string_view name) {
  for (const EnumName<E>& entry : table) {
    if (name == entry.name) return entry.value;
  }
  return std::nullopt;
}

}  // namespace distkit

#endif  // DISTKIT_CC_CORE_ENUM_NAMES_H_
