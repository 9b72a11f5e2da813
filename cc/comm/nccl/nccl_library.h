// The NCCL entry points the NCCL backend calls, resolved from libnccl.so.2
// with dlopen at first use (cc/core/shared_library.h), so libdistkit.so does
// not need NCCL to load. DISTKIT_NCCL_LIBRARY names an exact file; else
// NCCL_HOME, CUDA_HOME, the loader path and /usr/local/cuda are searched.
// The loaded NCCL must be at least 2.18 (ncclCommSplit).

#ifndef DISTKIT_CC_COMM_NCCL_NCCL_LIBRARY_H_
#define DISTKIT_CC_COMM_NCCL_NCCL_LIBRARY_H_

#include <nccl.h>

#include <string>

#include "absl/status/statusor.h"

namespace distkit {

struct NcclLibrary {
  std::string path;  // where libnccl was found
  int version = 0;   // ncclGetVersion's code, e.g. 22809
  decltype(&::ncclGetVersion) GetVersion;
  decltype(&::ncclGetErrorString) GetErrorString;
  decltype(&::ncclGetUniqueId) GetUniqueId;
  decltype(&::ncclCommInitRank) CommInitRank;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig;
  decltype(&::ncclCommSplit) CommSplit;
  decltype(&::ncclCommFinalize) CommFinalize;
  decltype(&::ncclCommDestroy) CommDestroy;
  decltype(&::ncclCommAbort) CommAbort;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError;
  decltype(&::ncclGroupStart) GroupStart;
  decltype(&::ncclGroupEnd) GroupEnd;
  decltype(&::ncclAllReduce) AllReduce;
  decltype(&::ncclBroadcast) Broadcast;
  decltype(&::ncclReduce) Reduce;
  decltype(&::ncclAllGather) AllGather;
  decltype(&::ncclReduceScatter) ReduceScatter;
  decltype(&::ncclSend) Send;
  decltype(&::ncclRecv) Recv;
};

// The process's NCCL, loaded once (thread-safe); FAILED_PRECONDITION saying
// what was tried when it cannot be loaded or is too old.
absl::StatusOr<const NcclLibrary*> LoadNcclLibrary();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_NCCL_NCCL_LIBRARY_H_
