// What the entry points of every section of the C ABI (capi/*_api.cc) call:
// the guard (NoThrow / BestEffort for those without a status), the argument
// checks, the handles, bytes handed across. The entry points are extern "C"
// functions at global scope, so the shared helpers are named there once,
// here, and each section names only its own.
// Private to those .cc files: no header includes it.

#ifndef DISTKIT_CAPI_ENTRY_POINT_H_
#define DISTKIT_CAPI_ENTRY_POINT_H_

#include "capi/abi_guard.h"
#include "capi/arguments.h"
#include "capi/caller_memory.h"
#include "capi/handles.h"
#include "capi/versioned_struct.h"
#include "cc/core/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/process_group.h"
#include "distkit/distkit.h"

using ::distkit::ProcessGroup;
using ::distkit::TensorRef;
using ::distkit::capi::BestEffort;
using ::distkit::capi::CheckBufferBytes;
using ::distkit::capi::CheckCount;
using ::distkit::capi::CheckOuts;
using ::distkit::capi::DefaultVersionedStruct;
using ::distkit::capi::GroupOf;
using ::distkit::capi::GroupOrNone;
using ::distkit::capi::Guard;
using ::distkit::capi::InitVersionedStruct;
using ::distkit::capi::NewHandle;
using ::distkit::capi::NoThrow;
using ::distkit::capi::NotNull;
using ::distkit::capi::OnHandle;
using ::distkit::capi::OwnedCopy;
using ::distkit::capi::ReadItems;
using ::distkit::capi::ReduceOpArg;
using ::distkit::capi::ReturnBytes;
using ::distkit::capi::ReturnData;
using ::distkit::capi::ReturnItems;
using ::distkit::capi::TensorArg;
using ::distkit::capi::TensorArgs;

#endif  // DISTKIT_CAPI_ENTRY_POINT_H_
