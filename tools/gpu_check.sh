#!/usr/bin/env bash
# Builds distkit's GPU paths without Bazel (g++ against the CUDA and NCCL this
# machine has, $CUDA_HOME, default /usr/local/cuda) and runs tools/gpu_check:
# every NCCL operation at world size 1, device casting with CUDA tensors, and
# an all_reduce bandwidth table. On a machine without a GPU it builds, says
# so, and exits 0. Needs Abseil and DLPack headers (tools/bootstrap.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cuda="${CUDA_HOME:-/usr/local/cuda}"
out="${GPU_CHECK_OUT:-/tmp/distkit_gpu_check}"
mkdir -p "$out"
for f in "$cuda/include/cuda_runtime.h" "$cuda/include/nccl.h" /usr/include/dlpack/dlpack.h; do
  [[ -e "$f" ]] || { echo "gpu_check.sh: $f not found" >&2; exit 2; }
done
absl_libs="$(pkg-config --libs absl_status absl_statusor absl_strings absl_synchronization absl_time absl_hash absl_raw_hash_set)"
libdir="$cuda/lib64"
[[ -d "$libdir" ]] || libdir="$cuda/lib"
sources=(
  cc/core/data_type.cc cc/core/device.cc cc/core/reduce_op.cc cc/core/status.cc
  cc/core/tensor_ref.cc cc/core/device_copy.cc cc/core/cuda_memory_cuda.cc
  cc/core/cuda_library.cc
  cc/core/shared_library.cc cc/comm/nccl/nccl_library.cc
  cc/comm/backend.cc cc/comm/backend_registry.cc cc/comm/reduce_kernels.cc
  cc/comm/op_context.cc cc/comm/op_signature.cc
  cc/comm/nccl/nccl_backend.cc cc/group/collective_contract.cc
  cc/group/flight_recorder.cc
  cc/store/store.cc cc/store/hash_store.cc cc/store/call_deadline.cc
  tools/gpu_check.cc
)
echo "gpu_check.sh: compiling ${#sources[@]} files with $(g++ --version | head -1)"
start=$(date +%s)
g++ -std=c++17 -O2 -I. -I"$cuda/include" "${sources[@]}" -o "$out/gpu_check" \
  -L"$libdir" -Wl,-rpath,"$libdir" -lnccl -lcudart $absl_libs -lpthread -ldl
echo "gpu_check.sh: built in $(( $(date +%s) - start )) s"
"$out/gpu_check"
