#include "cc/elastic/buffer_layout.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "cc/core/tensor_ref.h"

namespace distkit {
namespace elastic {
namespace {

void PutInt(std::string& out, int64_t v) {
  char bytes[sizeof(v)];
  std::memcpy(bytes, &v, sizeof(v));
  out.append(bytes, sizeof(v));
}

bool GetInt(absl::string_view& in, int64_t* v) {
  if (in.size() < sizeof(*v)) return false;
  std::memcpy(v, in.data(), sizeof(*v));
  in.remove_prefix(sizeof(*v));
  return true;
}

std::string Describe(const BufferLayout& layout) {
  return absl::StrCat(layout.buffers().size(), " buffer(s), ",
                      layout.total_bytes(), " bytes");
}

}  // namespace

absl::Status BufferLayout::Add(absl::string_view name, int64_t bytes) {
  if (name.empty()) {
    return absl::InvalidArgumentError("snapshot: a buffer needs a name");
  }
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot: buffer name '", name.substr(0, 40), "...' is ",
                     name.size(), " bytes long (at most ", kMaxNameBytes, ")"));
  }
  for (const Buffer& b : buffers_) {
    if (b.name == name) {
      return absl::InvalidArgumentError(
          absl::StrCat("snapshot: buffer '", name, "' is already registered"));
    }
  }
  if (bytes < 0 || bytes > TensorRef::kMaxBytes - total_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("snapshot: buffer '", name, "' of ", bytes, " bytes",
                     bytes < 0 ? " (a negative size)"
                               : absl::StrCat(" would take the snapshot past ",
                                              TensorRef::kMaxBytes, " bytes")));
  }
  buffers_.push_back(Buffer{std::string(name), bytes, total_bytes_});
  total_bytes_ += bytes;
  return absl::OkStatus();
}

std::string BufferLayout::Encode() const {
  std::string out;
  PutInt(out, static_cast<int64_t>(buffers_.size()));
  for (const Buffer& b : buffers_) {
    PutInt(out, static_cast<int64_t>(b.name.size()));
    out += b.name;
    PutInt(out, b.bytes);
  }
  return out;
}

absl::StatusOr<BufferLayout> BufferLayout::Decode(absl::string_view in) {
  const absl::Status bad =
      absl::InvalidArgumentError("snapshot: a rank sent a malformed layout");
  int64_t count = 0;
  if (!GetInt(in, &count) || count < 0 ||
      static_cast<uint64_t>(count) > in.size()) {
    return bad;
  }
  BufferLayout layout;
  for (int64_t i = 0; i < count; ++i) {
    int64_t length = 0, bytes = 0;
    if (!GetInt(in, &length) || length < 0 ||
        static_cast<uint64_t>(length) > in.size()) {
      return bad;
    }
    const absl::string_view name = in.substr(0, length);
    in.remove_prefix(length);
    if (!GetInt(in, &bytes)) return bad;
    absl::Status added = layout.Add(name, bytes);
    if (!added.ok()) return bad;
  }
  return layout;
}

absl::Status BufferLayout::CheckSame(const BufferLayout& reference,
                                     int reference_rank,
                                     const BufferLayout& other,
                                     int other_rank) {
  const std::vector<Buffer>& a = reference.buffers();
  const std::vector<Buffer>& b = other.buffers();
  const std::string rule =
      " (every rank registers the same buffers, with the same sizes, in the "
      "same order)";
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i].name != b[i].name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "snapshot: buffer ", i, " is '", a[i].name, "' on rank ",
          reference_rank, " but '", b[i].name, "' on rank ", other_rank, rule));
    }
    if (a[i].bytes != b[i].bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("snapshot: buffer '", a[i].name, "' is ", a[i].bytes,
                       " bytes on rank ", reference_rank, " but ", b[i].bytes,
                       " bytes on rank ", other_rank, rule));
    }
  }
  if (a.size() != b.size()) {
    const bool other_lacks = a.size() > b.size();
    const Buffer& extra = other_lacks ? a[b.size()] : b[a.size()];
    return absl::InvalidArgumentError(absl::StrCat(
        "snapshot: buffer '", extra.name, "' is registered on rank ",
        other_lacks ? reference_rank : other_rank, " but not on rank ",
        other_lacks ? other_rank : reference_rank, " (rank ", reference_rank,
        ": ", Describe(reference), "; rank ", other_rank, ": ", Describe(other),
        ")", rule));
  }
  return absl::OkStatus();
}

}  // namespace elastic
}  // namespace distkit
