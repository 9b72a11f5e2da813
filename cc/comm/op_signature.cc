#include "cc/comm/op_signature.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/core/data_type.h"
#include "cc/core/reduce_op.h"

namespace distkit {

std::string OpSignature::Describe(bool with_path) const {
  if (magic != kMagic) return "<garbled signature>";
  std::string s = absl::StrCat(OpCodeName(static_cast<OpCode>(op)), " #", seq);
  if (dtype >= 0) {
    absl::StatusOr<DataType> dt = DataTypeFromInt(dtype);
    absl::StrAppend(&s, " ", dt.ok() ? DataTypeName(*dt) : "?");
  }
  if (count >= 0) absl::StrAppend(&s, " x", count);
  if (count < 0 && static_cast<OpCode>(op) == OpCode::kAllToAll) {
    absl::StrAppend(&s, " (uneven splits)");
  }
  if (reduce_op >= 0) {
    absl::StatusOr<ReduceOp> r = ReduceOpFromInt(reduce_op);
    absl::StrAppend(&s, " op=", r.ok() ? ReduceOpName(*r) : "?");
  }
  if (root >= 0) absl::StrAppend(&s, " root=", root);
  if (with_path && path == 1) absl::StrAppend(&s, " on cpu");
  if (with_path && path == 2) absl::StrAppend(&s, " on cuda");
  return s;
}

absl::Status CheckAgreement(const OpContext& ctx,
                            absl::Span<const OpSignature> signatures) {
  bool all_equal = true;
  for (const OpSignature& s : signatures) {
    if (std::memcmp(&s, &signatures[0], sizeof(OpSignature)) != 0) {
      all_equal = false;
      break;
    }
  }
  if (all_equal) return absl::OkStatus();
  bool paths_differ = false;
  for (const OpSignature& s : signatures) {
    paths_differ |= s.path != signatures[0].path;
  }
  // Group ranks by what they called.
  std::vector<std::pair<std::string, std::vector<int>>> calls;
  for (size_t r = 0; r < signatures.size(); ++r) {
    const std::string d = signatures[r].Describe(paths_differ);
    bool found = false;
    for (auto& [desc, ranks] : calls) {
      if (desc == d) {
        ranks.push_back(static_cast<int>(r));
        found = true;
      }
    }
    if (!found) calls.push_back({d, {static_cast<int>(r)}});
  }
  std::vector<std::string> parts;
  for (const auto& [desc, ranks] : calls) {
    parts.push_back(
        absl::StrCat("rank(s) ", absl::StrJoin(ranks, ", "), " called ", desc));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "ranks disagree on ", ctx.Describe(), ": ", absl::StrJoin(parts, "; "),
      " (every rank must make the same collective calls in the "
      "same order, with the same sizes and dtypes)"));
}

OpSignature MakeSignature(const OpContext& ctx, OpCode op, const TensorRef* t,
                          int64_t count, int root, int reduce_op) {
  OpSignature sig;
  sig.op = static_cast<uint32_t>(op);
  sig.seq = ctx.seq;
  sig.dtype = t != nullptr ? static_cast<int32_t>(t->dtype()) : -1;
  sig.count = count;
  sig.root = root;
  sig.reduce_op = reduce_op;
  return sig;
}

}  // namespace distkit
