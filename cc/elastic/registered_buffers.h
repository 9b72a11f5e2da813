// RegisteredBuffers: the trainer's host buffers a snapshot copies (Snapshot,
// ShardedSnapshot), their layout and addresses, registered until the
// snapshot's first collective call freezes them: from then on every rank's
// layout is the one its peers compared.

#ifndef DISTKIT_CC_ELASTIC_REGISTERED_BUFFERS_H_
#define DISTKIT_CC_ELASTIC_REGISTERED_BUFFERS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cc/elastic/buffer_layout.h"

namespace distkit {
namespace elastic {

class RegisteredBuffers {
 public:
  // Errors begin with `owner` ("snapshot"); a registration after Freeze()
  // names the calls that froze it (`frozen_by`: "Commit or Sync") and adds
  // `advice` after the refusal.
  RegisteredBuffers(std::string owner, std::string frozen_by,
                    std::string advice)
      : owner_(std::move(owner)),
        frozen_by_(std::move(frozen_by)),
        advice_(std::move(advice)) {}

  // Adds `bytes` at `data` under `name`. FAILED_PRECONDITION once frozen;
  // INVALID_ARGUMENT for no memory behind a size, or what BufferLayout::Add
  // refuses.
  absl::Status Register(absl::string_view name, void* data, int64_t bytes);
  void Freeze() { frozen_ = true; }

  const BufferLayout& layout() const { return layout_; }
  // One address per buffer, in the layout's order.
  const std::vector<void*>& data() const { return data_; }

 private:
  const std::string owner_, frozen_by_, advice_;
  BufferLayout layout_;
  std::vector<void*> data_;
  bool frozen_ = false;
};

}  // namespace elastic
}  // namespace distkit

#endif  // DISTKIT_CC_ELASTIC_REGISTERED_BUFFERS_H_
