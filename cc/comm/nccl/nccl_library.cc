#include "cc/comm/nccl/nccl_library.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/core/shared_library.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// ncclCommSplit appeared in 2.18.
constexpr int kMinVersion = 21800;

absl::StatusOr<NcclLibrary> Load() {
  DK_ASSIGN_OR_RETURN(SharedLibrary lib,
                      OpenSharedLibrary(CudaToolkitSearch(
                          "NCCL", absl::StrCat("libnccl.so.", NCCL_MAJOR),
                          "DISTKIT_NCCL_LIBRARY", {"NCCL_HOME", "CUDA_HOME"})));
  NcclLibrary n;
  n.path = lib.path;
#define DK_RESOLVE(field, symbol) \
  DK_RETURN_IF_ERROR(ResolveSymbol(lib, #symbol, &n.field))
  DK_RESOLVE(GetVersion, ncclGetVersion);
  DK_RESOLVE(GetErrorString, ncclGetErrorString);
  if (n.GetVersion(&n.version) != ncclSuccess || n.version < kMinVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL at ", n.path, " is version ", n.version,
        "; distkit needs NCCL 2.18 or newer (set DISTKIT_NCCL_LIBRARY)"));
  }
  DK_RESOLVE(GetUniqueId, ncclGetUniqueId);
  DK_RESOLVE(CommInitRank, ncclCommInitRank);
  DK_RESOLVE(CommInitRankConfig, ncclCommInitRankConfig);
  DK_RESOLVE(CommSplit, ncclCommSplit);
  DK_RESOLVE(CommFinalize, ncclCommFinalize);
  DK_RESOLVE(CommDestroy, ncclCommDestroy);
  DK_RESOLVE(CommAbort, ncclCommAbort);
  DK_RESOLVE(CommGetAsyncError, ncclCommGetAsyncError);
  DK_RESOLVE(GroupStart, ncclGroupStart);
  DK_RESOLVE(GroupEnd, ncclGroupEnd);
  DK_RESOLVE(AllReduce, ncclAllReduce);
  DK_RESOLVE(Broadcast, ncclBroadcast);
  DK_RESOLVE(Reduce, ncclReduce);
  DK_RESOLVE(AllGather, ncclAllGather);
  DK_RESOLVE(ReduceScatter, ncclReduceScatter);
  DK_RESOLVE(Send, ncclSend);
  DK_RESOLVE(Recv, ncclRecv);
#undef DK_RESOLVE
  return n;
}

}  // namespace

absl::StatusOr<const NcclLibrary*> LoadNcclLibrary() {
  return LoadOnce<NcclLibrary, Load>();
}

}  // namespace distkit
