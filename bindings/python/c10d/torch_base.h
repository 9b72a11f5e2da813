// The c10d class the "distkit" backend extends. torch 1.13 dispatches to a
// ProcessGroup subclass; torch 2.x to a Backend subclass, registered per
// device (Backend.register_backend(..., devices=[...])) and wrapped in
// torch's own ProcessGroup. The operations the backend overrides have the
// same signatures in both, so one class serves either. Bazel builds it
// against Debian's 1.13; build_without_bazel.sh against a pip torch 2.x
// (tools/gpu_check_python.py builds and runs it on torch 2.11 with CUDA).

#ifndef DISTKIT_BINDINGS_PYTHON_C10D_TORCH_BASE_H_
#define DISTKIT_BINDINGS_PYTHON_C10D_TORCH_BASE_H_

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace distkit {
namespace c10d_ext {

#if TORCH_VERSION_MAJOR >= 2
using TorchBackendBase = c10d::Backend;
// The Python class (torch._C._distributed_c10d) the module's class extends.
inline constexpr char kTorchBaseClass[] = "Backend";
#else
using TorchBackendBase = c10d::ProcessGroup;
inline constexpr char kTorchBaseClass[] = "ProcessGroup";
#endif

}  // namespace c10d_ext
}  // namespace distkit

#endif  // DISTKIT_BINDINGS_PYTHON_C10D_TORCH_BASE_H_
