#include "cc/comm/mpi/mpi_types.h"

#include <utility>

#include "absl/base/call_once.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cc/comm/reduce_kernels.h"

namespace distkit {
namespace {

// The native MPI type of `dtype`, or MPI_DATATYPE_NULL (half types, bool).
MPI_Datatype NativeType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op NativeOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kBand:
      return MPI_BAND;
    case ReduceOp::kBor:
      return MPI_BOR;
    case ReduceOp::kBxor:
      return MPI_BXOR;
    case ReduceOp::kMean:  // the contract sends a sum
      break;
  }
  return MPI_OP_NULL;
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

}  // namespace

absl::StatusOr<MpiTypeAndOp> MpiReduction(DataType dtype, ReduceOp op) {
  MPI_Datatype native = NativeType(dtype);
  if (native != MPI_DATATYPE_NULL) return MpiTypeAndOp{native, NativeOp(op)};
  absl::MutexLock lock(&user_mu);
  const int d = static_cast<int>(dtype), o = static_cast<int>(op);
  const size_t elem = ElementSize(dtype);
  if (byte_types[elem] == MPI_DATATYPE_NULL || byte_types[elem] == 0) {
    MPI_Type_contiguous(static_cast<int>(elem), MPI_BYTE, &byte_types[elem]);
    MPI_Type_commit(&byte_types[elem]);
  }
  if (user_ops[d][o] == MPI_OP_NULL || user_ops[d][o] == 0) {
    MPI_User_function* fn = UserFunction(dtype, op);
    if (fn == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("mpi: no reduction for ", DataTypeName(dtype)));
    }
    MPI_Op_create(fn, /*commute=*/1, &user_ops[d][o]);
  }
  return MpiTypeAndOp{byte_types[elem], user_ops[d][o]};
}

MPI_Datatype MpiElementType(DataType dtype) {
  MPI_Datatype native = NativeType(dtype);
  if (native != MPI_DATATYPE_NULL) return native;
  return ElementSize(dtype) == 2 ? MPI_UINT16_T : MPI_UINT8_T;
}

}  // namespace distkit
