#!/usr/bin/env bash
# The GPU checks, without Bazel: builds distkit's CUDA paths with g++ against
# the CUDA and NCCL this machine has ($CUDA_HOME, default /usr/local/cuda) and
# runs tools/gpu_check (C++, world size 1 on cuda:0: every NCCL op x dtype,
# the casting rule and the GradReducer with CUDA tensors, an NCCL all_reduce
# busbw table beside raw NCCL calls made in the same program), then
# tools/gpu_check_python.py (CUDA tensors at world sizes 1-4 over Gloo, DDP
# with CUDA parameters against CPU DDP, object collectives over NCCL) when a
# loadable libdistkit.so and torch with CUDA are at hand.
#
# Prints one PASS / FAIL / SKIPPED line per check and a final count; exits
# non-zero on any FAIL. Without a GPU it builds, prints why nothing ran, and
# exits 77 (skipped: nothing was checked, so it does not read as a pass).
# Needs Abseil and DLPack headers (tools/bootstrap.sh). Under 5
# minutes on one GPU; GPU_CHECK_QUICK=1 shortens the bandwidth table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cuda="${CUDA_HOME:-/usr/local/cuda}"
out="${GPU_CHECK_OUT:-/tmp/distkit_gpu_check}"
mkdir -p "$out/obj"
for f in "$cuda/include/cuda_runtime.h" "$cuda/include/nccl.h" /usr/include/dlpack/dlpack.h; do
  [[ -e "$f" ]] || { echo "gpu_check.sh: $f not found" >&2; exit 2; }
done
absl_libs="$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format \
  absl_synchronization absl_time absl_hash absl_raw_hash_set absl_random_random)"
libdir="$cuda/lib64"
[[ -d "$libdir" ]] || libdir="$cuda/lib"
# The library's CUDA-relevant layers (no Gloo, MPI or shared memory: the
# NCCL backend is registered by gpu_check.cc itself).
sources=(
  cc/core/data_type.cc cc/core/device.cc cc/core/float_cast.cc cc/core/reduce_op.cc
  cc/core/status.cc cc/core/tensor_ref.cc cc/core/device_copy.cc
  cc/core/cuda_memory_cuda.cc cc/core/cuda_library.cc cc/core/shared_library.cc
  cc/comm/backend.cc cc/comm/backend_registry.cc cc/comm/reduce_kernels.cc
  cc/comm/reduce_kernels_avx2.cc cc/comm/reduce_kernels_avx512.cc
  cc/comm/op_context.cc cc/comm/op_signature.cc cc/comm/work.cc
  cc/comm/nccl/nccl_backend.cc cc/comm/nccl/nccl_comm.cc cc/comm/nccl/nccl_library.cc
  cc/group/agreement_roll_call.cc cc/group/collective_contract.cc cc/group/flight_recorder.cc
  cc/group/op_queue.cc
  cc/group/process_group.cc
  cc/store/store.cc cc/store/hash_store.cc cc/store/call_deadline.cc cc/store/prefix_store.cc
  cc/parallel/bucket_assignment.cc cc/parallel/grad_reducer.cc
  tools/gpu_check.cc
)
echo "gpu_check.sh: compiling ${#sources[@]} files with $(g++ --version | head -1), $(nproc) at a time"
start=$(date +%s)
# Without a GPU nothing below runs: the build only has to prove that it
# compiles and links, so it is not optimized (less than half the time); with a
# GPU it is the real build.
if [[ -e /dev/nvidiactl ]] || nvidia-smi -L >/dev/null 2>&1; then
  unoptimized=0
else
  unoptimized=1
  echo "gpu_check.sh: no GPU here (no /dev/nvidiactl): building at -O0 to prove the build"
fi
# The reduction loops take cc/comm/BUILD.bazel's flags: -O3, no fused
# multiply-add, and each wide variant its instruction set (x86-64 only; the
# variants compile to nothing elsewhere).
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c '
  flags=-O2
  case "$2" in
    cc/comm/reduce_kernels*.cc) flags="-O3 -ffp-contract=off" ;;
  esac
  if [ "$4" = 1 ]; then flags="-O0 -ffp-contract=off"; fi
  if [ "$(uname -m)" = x86_64 ]; then
    case "$2" in
      cc/comm/reduce_kernels_avx2.cc) flags="$flags -mavx2 -mf16c" ;;
      cc/comm/reduce_kernels_avx512.cc)
        flags="$flags -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c -mprefer-vector-width=512" ;;
    esac
  fi
  g++ -std=c++17 $flags -I. -I"$1/include" -c "$2" -o "$3/obj/$(echo "$2" | tr / _).o"' \
  _ "$cuda" {} "$out" "$unoptimized"
g++ "$out"/obj/*.o -o "$out/gpu_check" \
  -L"$libdir" -Wl,-rpath,"$libdir" -lnccl -lcudart $absl_libs -lpthread -ldl
echo "gpu_check.sh: built in $(( $(date +%s) - start )) s"
# Each part exits 0 (ran, passed), 77 (checked nothing: no GPU) or another
# code (failed). The whole: failed if a part failed, 77 if no part ran, else 0.
cc_status=0
"$out/gpu_check" || cc_status=$?
echo "gpu_check.sh: the Python checks"
python="${PYTHON:-python3}"
"$python" -c "import torch" 2>/dev/null || { [[ -x /usr/bin/python3 ]] && python=/usr/bin/python3; }
py_status=0
"$python" tools/gpu_check_python.py || py_status=$?
for s in "$cc_status" "$py_status"; do
  if [[ "$s" -ne 0 && "$s" -ne 77 ]]; then exit "$s"; fi
done
if [[ "$cc_status" -eq 77 && "$py_status" -eq 77 ]]; then
  echo "gpu_check.sh: SKIPPED: built, but no check could run here (no usable GPU)"
  exit 77
fi
exit 0
