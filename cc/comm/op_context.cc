#include "cc/comm/op_context.h"

#include "absl/strings/str_cat.h"

namespace distkit {

std::string OpContext::Describe() const {
  return absl::StrCat(op_name(), " #", seq, " on group '", group_name, "'");
}

}  // namespace distkit
