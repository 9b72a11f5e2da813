// distkit's dtypes and reductions as MPI types and ops. Native ones where
// MPI has them; float16, bfloat16 and bool use a contiguous byte type of the
// element's size and a user op per (dtype, op) that runs distkit's own kernel,
// so rounding matches every other backend.

#ifndef DISTKIT_CC_COMM_MPI_MPI_TYPES_H_
#define DISTKIT_CC_COMM_MPI_MPI_TYPES_H_

#include <mpi.h>

#include "absl/status/statusor.h"
#include "cc/core/data_type.h"
#include "cc/core/reduce_op.h"

namespace distkit {

struct MpiTypeAndOp {
  MPI_Datatype type;
  MPI_Op op;
};

// The MPI type and op that reduce `dtype` with `op` (validated by the
// contract; mean never arrives here). Not under DK_MPI (it may take
// MpiMutex()).
absl::StatusOr<MpiTypeAndOp> MpiReduction(DataType dtype, ReduceOp op);

// A type of `dtype`'s element size for moving data (native where MPI has
// one, else an unsigned integer of the same width).
MPI_Datatype MpiElementType(DataType dtype);

// `dtype`'s element as bytes: MPI_BYTE for one-byte elements, else a
// contiguous type of the element's size in MPI_BYTEs (made once). Messages
// counted in these take up to 2^31 - 1 elements, and their type signature is
// bytes, so a receive of the same bytes as MPI_BYTE matches them (the
// contract drops a mismatched message that way). Takes MpiMutex() the first
// time: never call it under DK_MPI.
MPI_Datatype MpiElementBytes(DataType dtype);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_MPI_MPI_TYPES_H_
