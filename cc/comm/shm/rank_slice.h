// How the shared-memory paths cut n elements among a group's ranks when each
// rank handles a part of them (folds its slice, pushes its share): rank r
// of `size` takes elements [SliceBegin(n, r, size), SliceBegin(n, r + 1,
// size)), the same cut on every rank.

#ifndef DISTKIT_CC_COMM_SHM_RANK_SLICE_H_
#define DISTKIT_CC_COMM_SHM_RANK_SLICE_H_

#include <cstdint>

namespace distkit {

inline int64_t SliceBegin(int64_t n, int r, int size) { return n * r / size; }

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_RANK_SLICE_H_
