// What the files of FlatShard's implementation (flat_shard.cc,
// flat_shard_state_dict.cc) share: a flat buffer's state. Private to them.

#ifndef DISTKIT_CC_PARALLEL_FLAT_SHARD_FLAT_H_
#define DISTKIT_CC_PARALLEL_FLAT_SHARD_FLAT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "cc/comm/work.h"
#include "cc/core/device_copy.h"
#include "cc/core/tensor_ref.h"
#include "cc/parallel/flat_shard.h"

namespace distkit {
namespace flat_shard_internal {

// Memory the unit owns, with its size (for accounting).
struct Owned {
  DeviceBuffer buffer;
  TensorRef view;  // numel elements of dtype on the buffer's device
  bool live() const { return view.data() != nullptr; }
  size_t bytes() const { return live() ? view.nbytes() : 0; }
  void Free() {
    buffer = DeviceBuffer();
    view = TensorRef();
  }
};

// `numel` elements of `dtype` on `device`, owned (FlatShard's one allocator,
// where FailAllocationForTesting fails one).
absl::StatusOr<Owned> Allocate(Device device, DataType dtype, int64_t numel);

}  // namespace flat_shard_internal

struct FlatShard::Flat {
  DataType dtype = DataType::kFloat32;  // the parameters' (master) dtype
  bool frozen = false;      // no gradient: no shard_grad, full_grad, reduction
  int64_t numel = 0;        // unpadded
  int64_t padded = 0;       // a multiple of the shard count
  int64_t shard_numel = 0;  // padded / shard count
  flat_shard_internal::Owned shard;       // master values, shard device
  flat_shard_internal::Owned shard_grad;  // master dtype, shard device
  flat_shard_internal::Owned
      gather_in;  // the shard in compute dtype on the parameters' device
  flat_shard_internal::Owned
      full;  // padded x compute dtype (or a view of the shard)
  flat_shard_internal::Owned full_grad;  // padded x compute dtype
  bool full_is_shard = false;  // NO_SHARD in the shard's own dtype and device
  std::shared_ptr<Work> gather;
  // A reduction in flight: its input (the full gradient, or a cast copy)
  // and output (this rank's part), lent to `reduce` until it completes.
  flat_shard_internal::Owned reduce_in;
  flat_shard_internal::Owned reduce_out;
  bool reduce_direct = false;  // into shard_grad itself (it was zero)
  std::shared_ptr<Work> reduce;
};

}  // namespace distkit

#endif  // DISTKIT_CC_PARALLEL_FLAT_SHARD_FLAT_H_
