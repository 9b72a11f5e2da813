// BufferLayout: the names and sizes of the host buffers an elastic Snapshot
// holds, in the order they were registered. Ranks compare their layouts
// before a snapshot travels from one to the others (a buffer registered
// under another name, size or place on one rank would otherwise receive
// someone else's bytes), so a layout encodes to bytes and back, and a
// difference names the buffer and the ranks.

#ifndef DISTKIT_CC_ELASTIC_BUFFER_LAYOUT_H_
#define DISTKIT_CC_ELASTIC_BUFFER_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace distkit {
namespace elastic {

class BufferLayout {
 public:
  struct Buffer {
    std::string name;
    int64_t bytes = 0;
    int64_t offset = 0;  // where it starts in a snapshot of the layout
  };

  // The longest name a buffer may have.
  static constexpr size_t kMaxNameBytes = 1024;

  // Appends a buffer. INVALID_ARGUMENT for an empty, too long or repeated
  // name, a negative size, or one that takes the layout past
  // TensorRef::kMaxBytes.
  absl::Status Add(absl::string_view name, int64_t bytes);

  const std::vector<Buffer>& buffers() const { return buffers_; }
  int64_t total_bytes() const { return total_bytes_; }

  // A self-delimiting encoding: the count, then each name and size.
  std::string Encode() const;
  // The layout `encoded` describes; INVALID_ARGUMENT when it is not one.
  static absl::StatusOr<BufferLayout> Decode(absl::string_view encoded);

  // OK when `other` (rank `other_rank`'s) equals `reference` (rank
  // `reference_rank`'s); else INVALID_ARGUMENT naming the first buffer that
  // differs and both ranks.
  static absl::Status CheckSame(const BufferLayout& reference,
                                int reference_rank, const BufferLayout& other,
                                int other_rank);

 private:
  std::vector<Buffer> buffers_;
  int64_t total_bytes_ = 0;
};

}  // namespace elastic
}  // namespace distkit

#endif  // DISTKIT_CC_ELASTIC_BUFFER_LAYOUT_H_
