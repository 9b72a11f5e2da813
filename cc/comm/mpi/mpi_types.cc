#include "cc/comm/mpi/mpi_types.h"

#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cc/comm/mpi/mpi_library.h"
#include "cc/comm/mpi/mpi_runtime.h"
#include "cc/comm/reduce_kernels.h"

namespace distkit {
namespace {

// The native MPI type of `dtype`, or MPI_DATATYPE_NULL (half types, bool).
MPI_Datatype NativeType(const MpiLibrary& mpi, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return mpi.float32;
    case DataType::kFloat64:
      return mpi.float64;
    case DataType::kInt8:
      return mpi.int8;
    case DataType::kUInt8:
      return mpi.uint8;
    case DataType::kInt32:
      return mpi.int32;
    case DataType::kInt64:
      return mpi.int64;
    default:
      return mpi.datatype_null;
  }
}

MPI_Op NativeOp(const MpiLibrary& mpi, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return mpi.sum;
    case ReduceOp::kProduct:
      return mpi.prod;
    case ReduceOp::kMin:
      return mpi.min;
    case ReduceOp::kMax:
      return mpi.max;
    case ReduceOp::kBand:
      return mpi.band;
    case ReduceOp::kBor:
      return mpi.bor;
    case ReduceOp::kBxor:
      return mpi.bxor;
    case ReduceOp::kMean:  // the contract sends a sum
      break;
  }
  return mpi.op_null;
}

constexpr int kNumDtypes = 9;
constexpr int kNumOps = 8;
MPI_Op user_ops[kNumDtypes][kNumOps];
MPI_Datatype byte_types[9];
absl::Mutex user_mu;

template <int D, int O>
void UserOp(void* in, void* inout, int* len, MPI_Datatype*) {
  static const ReduceFn fn =
      *GetReduceFn(static_cast<DataType>(D), static_cast<ReduceOp>(O));
  fn(inout, inout, in, *len);
}

template <int D, int... O>
void FillOps(std::integer_sequence<int, O...>, MPI_User_function** table) {
  ((table[O] = &UserOp<D, O>), ...);
}

MPI_User_function* UserFunction(DataType dtype, ReduceOp op) {
  static MPI_User_function* table[kNumDtypes][kNumOps] = {};
  static absl::once_flag once;
  absl::call_once(once, [] {
    using Ops = std::make_integer_sequence<int, kNumOps>;
    FillOps<static_cast<int>(DataType::kFloat16)>(
        Ops(), table[static_cast<int>(DataType::kFloat16)]);
    FillOps<static_cast<int>(DataType::kBFloat16)>(
        Ops(), table[static_cast<int>(DataType::kBFloat16)]);
    FillOps<static_cast<int>(DataType::kBool)>(
        Ops(), table[static_cast<int>(DataType::kBool)]);
  });
  return table[static_cast<int>(dtype)][static_cast<int>(op)];
}

// The contiguous type of `elem` bytes (made once), with user_mu held.
MPI_Datatype ByteTypeLocked(const MpiLibrary& mpi, size_t elem) {
  if (byte_types[elem] == mpi.datatype_null || byte_types[elem] == 0) {
    DK_MPI(mpi.TypeContiguous(static_cast<int>(elem), mpi.byte,
                              &byte_types[elem]));
    DK_MPI(mpi.TypeCommit(&byte_types[elem]));
  }
  return byte_types[elem];
}

}  // namespace

absl::StatusOr<MpiTypeAndOp> MpiReduction(DataType dtype, ReduceOp op) {
  const MpiLibrary& mpi = Mpi();
  MPI_Datatype native = NativeType(mpi, dtype);
  if (native != mpi.datatype_null) {
    return MpiTypeAndOp{native, NativeOp(mpi, op)};
  }
  absl::MutexLock lock(&user_mu);
  const int d = static_cast<int>(dtype), o = static_cast<int>(op);
  const size_t elem = ElementSize(dtype);
  ByteTypeLocked(mpi, elem);
  if (user_ops[d][o] == mpi.op_null || user_ops[d][o] == 0) {
    MPI_User_function* fn = UserFunction(dtype, op);
    if (fn == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("mpi: no reduction for ", DataTypeName(dtype)));
    }
    mpi.OpCreate(fn, /*commute=*/1, &user_ops[d][o]);
  }
  return MpiTypeAndOp{byte_types[elem], user_ops[d][o]};
}

MPI_Datatype MpiElementType(DataType dtype) {
  const MpiLibrary& mpi = Mpi();
  MPI_Datatype native = NativeType(mpi, dtype);
  if (native != mpi.datatype_null) return native;
  return ElementSize(dtype) == 2 ? mpi.uint16 : mpi.uint8;
}

MPI_Datatype MpiElementBytes(DataType dtype) {
  const MpiLibrary& mpi = Mpi();
  const size_t elem = ElementSize(dtype);
  if (elem == 1) return mpi.byte;
  absl::MutexLock lock(&user_mu);
  return ByteTypeLocked(mpi, elem);
}

}  // namespace distkit
