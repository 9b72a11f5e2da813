#!/usr/bin/env bash
# The GPU checks, without Bazel: builds distkit's CUDA paths with g++ against
# CUDA's and NCCL's headers and runs tools/gpu_check (C++; gpu_check.cc says
# what it checks: every NCCL operation x dtype against computed values and
# raw NCCL calls, at world size 1 and, with 2 or more GPUs, at min(GPUs, 4)
# ranks, a GPU each; sends, subgroups, the GradReducer, a bandwidth table),
# then tools/gpu_check_python.py (distkit's Python package with CUDA tensors,
# when torch has CUDA).
#
# Nothing links libcudart or libnccl: both halves load them the way distkit
# does, so the same run works on a GPU machine and on the simulator:
#
#   bazel build //testing/gpu_sim:libdkgpusim.so
#   sim=bazel-bin/testing/gpu_sim/libdkgpusim.so
#   DISTKIT_CUDART_LIBRARY=$sim DISTKIT_NCCL_LIBRARY=$sim DKSIM_DEVICES=4 \
#     GPU_CHECK_QUICK=1 tools/gpu_check.sh
#
# Headers: cuda_runtime_api.h from $CUDA_HOME/include (default
# /usr/local/cuda), else pip's nvidia packages; nccl.h from $NCCL_HOME/include,
# /usr/include, $CUDA_HOME/include or pip's nvidia-nccl (python3 -c 'import
# nvidia.nccl'). At run time distkit's search finds libnccl.so.2 and
# libcudart.so.<major>, or DISTKIT_NCCL_LIBRARY / DISTKIT_CUDART_LIBRARY name them;
# each is set to pip's copy when no other is found. Abseil and DLPack: the system's (tools/bootstrap.sh), or an
# include/ and lib/ beside tools/ (the bundle, tools/gpu_bundle.sh).
#
# Prints one PASS / FAIL / SKIPPED line per check and, last, their counts.
# Exits 1 on any FAIL; 77 when the C++ half found no GPU to run on (it still
# builds: the build is checked; not a pass, since nothing ran); else 0.
# GPU_CHECK_REQUIRE=1 (on a GPU machine) makes every SKIPPED a failure except
# those that need more GPUs than the machine has ("needs N GPUs, M here").
#
#   GPU_CHECK_QUICK=1        a short bandwidth table (up to 1 MiB); or --quick
#   GPU_CHECK_MAX_BYTES=N    the table's largest size
#   GPU_CHECK_TIMEOUT_S=N    each job's deadline (default 600; ranks past it
#                            are killed and fail)
#   GPU_CHECK_OPT=0|2        optimization (default: 2 where a GPU is, else 0:
#                            without one the build only has to compile)
#   GPU_CHECK_OUT=DIR        build directory (default /tmp/distkit_gpu_check/
#                            <a hash of this checkout's path>; objects are
#                            reused while their sources and headers are
#                            unchanged)
#   GPU_CHECK_PREBUILT=FILE  run this gpu_check instead of building one (the
#                            bundle's; rebuilt from the sources beside it when
#                            it cannot load here)
#   --build-only             build, print the binary's path, run nothing
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_only=0
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --quick) export GPU_CHECK_QUICK=1 ;;
    *) echo "usage: $0 [--build-only] [--quick]" >&2; exit 2 ;;
  esac
done
cuda="${CUDA_HOME:-/usr/local/cuda}"
# One build directory per checkout: objects are reused by comparing times
# with the sources and headers their .d files name (relative paths), which
# would match another checkout's files and reuse objects built from them.
out="${GPU_CHECK_OUT:-/tmp/distkit_gpu_check/$(pwd -P | md5sum | cut -c1-12)}"
python="${PYTHON:-python3}"
"$python" -c "import torch" 2>/dev/null || { [[ -x /usr/bin/python3 ]] && python=/usr/bin/python3; }

say() { echo "gpu_check.sh: $*"; }

# A directory of pip's nvidia packages holding `file` (nvidia.nccl's, else
# any), for machines whose CUDA or NCCL came from pip.
pip_nvidia_dir() {  # file
  "$python" - "$1" 2>/dev/null <<'PY' || true
import glob, os, sys
try:
    import nvidia
except ImportError:
    sys.exit(0)
for base in nvidia.__path__:
    hits = sorted(glob.glob(os.path.join(base, "**", sys.argv[1]), recursive=True))
    if hits:
        print(os.path.dirname(hits[0]))
        break
PY
}

have_gpu() { [[ -e /dev/nvidiactl ]] || nvidia-smi -L >/dev/null 2>&1; }

build() {
  local cuda_inc="" nccl_inc="" d
  for d in "$cuda/include" /usr/local/cuda/include "$(pip_nvidia_dir cuda_runtime_api.h)"; do
    [[ -n "$d" && -e "$d/cuda_runtime_api.h" ]] && { cuda_inc="$d"; break; }
  done
  for d in ${NCCL_HOME:+"$NCCL_HOME/include"} /usr/include "$cuda/include"; do
    [[ -e "$d/nccl.h" ]] && { nccl_inc="$d"; break; }
  done
  [[ -n "$nccl_inc" ]] || nccl_inc="$(pip_nvidia_dir nccl.h)"
  [[ -n "$nccl_inc" ]] || { say "nccl.h not found (NCCL_HOME, /usr/include, $cuda/include, pip's nvidia-nccl)" >&2; exit 2; }
  [[ -n "$cuda_inc" ]] || { say "cuda_runtime_api.h not found (CUDA_HOME=$cuda, pip's nvidia packages)" >&2; exit 2; }
  local includes=(-I. -I"$nccl_inc" -I"$cuda_inc")  # the NCCL found first wins
  [[ -d include ]] && includes+=(-Iinclude)  # the bundle's Abseil and DLPack
  local inc_dirs=(/usr/include)
  [[ -d include ]] && inc_dirs=(include /usr/include)
  local found=0
  for d in "${inc_dirs[@]}"; do [[ -e "$d/dlpack/dlpack.h" ]] && found=1; done
  ((found)) || { say "dlpack/dlpack.h not found (tools/bootstrap.sh installs it)" >&2; exit 2; }
  local absl_libs
  if [[ -n "${GPU_CHECK_ABSL_LIBS:-}" ]]; then
    absl_libs="$GPU_CHECK_ABSL_LIBS"
  elif compgen -G 'lib/libabsl_*.so*' >/dev/null; then
    absl_libs="$(printf '%s ' "$PWD"/lib/libabsl_*.so*)"
  else
    absl_libs="$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format \
      absl_synchronization absl_time absl_hash absl_raw_hash_set absl_random_random)"
  fi
  local opt="${GPU_CHECK_OPT:-}"
  if [[ -z "$opt" ]]; then
    if have_gpu; then opt=2; else opt=0; fi
  fi
  ((opt == 0)) && say "no GPU here (no /dev/nvidiactl): building at -O0, which only has to compile"
  # The library's CUDA-relevant layers (no Gloo, MPI or shared memory, but
  # the host identity the NCCL backend records: the NCCL backend is
  # registered by gpu_check.cc itself) and the TCP store.
  local sources=(
    cc/core/data_type.cc cc/core/device.cc cc/core/float_cast.cc cc/core/reduce_op.cc
    cc/core/status.cc cc/core/tensor_ref.cc cc/core/device_copy.cc cc/core/copy_stream.cc cc/core/bench_without.cc
    cc/core/cuda_block_cache.cc cc/core/cuda_memory_cuda.cc cc/core/cuda_library.cc cc/core/shared_library.cc
    cc/comm/backend.cc cc/comm/backend_registry.cc cc/comm/reduce_kernels.cc
    cc/comm/reduce_kernels_avx2.cc cc/comm/reduce_kernels_avx512.cc
    cc/comm/op_context.cc cc/comm/op_signature.cc cc/comm/rank_names.cc cc/comm/work.cc
    cc/comm/shm/host_map.cc
    cc/comm/nccl/nccl_backend.cc cc/comm/nccl/nccl_comm.cc cc/comm/nccl/nccl_library.cc
    cc/comm/nccl/pinned_pool.cc
    cc/group/agreement.cc cc/group/agreement_roll_call.cc cc/group/collective_contract.cc
    cc/group/flight_recorder.cc cc/group/issuer.cc
    cc/group/op_queue.cc cc/group/process_group.cc cc/group/process_group_ops.cc
    cc/store/store.cc cc/store/hash_store.cc cc/store/call_deadline.cc cc/store/prefix_store.cc
    cc/store/gather_once.cc
    cc/store/request_limits.cc cc/store/tcp_store.cc cc/store/store_server.cc cc/store/job_failure.cc
    cc/store/internal/handshake.cc cc/store/internal/hmac_sha256.cc
    cc/store/internal/socket.cc cc/store/internal/wire.cc
    cc/parallel/bucket_assignment.cc cc/parallel/grad_reducer.cc
    tools/gpu_check.cc
  )
  local obj="$out/obj-O$opt" stale=() src o dep
  mkdir -p "$obj"
  # Other include directories (another CUDA, NCCL from pip): every object
  # again.
  if [[ "$(cat "$obj/includes" 2>/dev/null)" != "${includes[*]}" ]]; then
    rm -f "$obj"/*.o "$obj"/*.d
    echo "${includes[*]}" >"$obj/includes"
  fi
  # An object is rebuilt when it is missing or a file it was built from (its
  # .d list: the source and every header) is newer.
  for src in "${sources[@]}"; do
    o="$obj/$(echo "$src" | tr / _).o"
    if [[ ! -e "$o" || ! -e "${o%.o}.d" ]]; then
      stale+=("$src")
      continue
    fi
    for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "${o%.o}.d"); do
      if [[ ! -e "$dep" || "$dep" -nt "$o" ]]; then
        stale+=("$src")
        break
      fi
    done
  done
  local start
  start=$(date +%s)
  if ((${#stale[@]})); then
    say "compiling ${#stale[@]} of ${#sources[@]} files at -O$opt with $(g++ --version | head -1), $(nproc) at a time"
    # The reduction loops take cc/comm/BUILD.bazel's flags: -O3, no fused
    # multiply-add, and each wide variant its instruction set (x86-64 only;
    # the variants compile to nothing elsewhere).
    printf '%s\n' "${stale[@]}" | xargs -P "$(nproc)" -I{} sh -c '
      src="$1"; o="$2/$(echo "$1" | tr / _).o"; opt="$3"; shift 3
      flags="-O$opt"
      case "$src" in
        cc/comm/reduce_kernels*.cc) [ "$opt" != 0 ] && flags="-O3"; flags="$flags -ffp-contract=off" ;;
      esac
      if [ "$(uname -m)" = x86_64 ]; then
        case "$src" in
          cc/comm/reduce_kernels_avx2.cc) flags="$flags -mavx2 -mf16c" ;;
          cc/comm/reduce_kernels_avx512.cc)
            flags="$flags -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c -mprefer-vector-width=512" ;;
        esac
      fi
      # Written aside and renamed: a build beside this one (another user of
      # the same directory) never sees half an object.
      g++ -std=c++17 $flags "$@" -MMD -MF "${o%.o}.d.$$" -MT "$o" -c "$src" -o "$o.$$" &&
        mv "${o%.o}.d.$$" "${o%.o}.d" && mv "$o.$$" "$o"' \
      _ {} "$obj" "$opt" "${includes[@]}"
  fi
  bin="$out/gpu_check-O$opt"
  local relink=0 objects=()
  [[ -e "$bin" ]] || relink=1
  for src in "${sources[@]}"; do
    objects+=("$obj/$(echo "$src" | tr / _).o")
    [[ "${objects[-1]}" -nt "$bin" ]] && relink=1
  done
  if ((relink)); then
    # shellcheck disable=SC2086
    g++ "${objects[@]}" -o "$bin.$$" $absl_libs -lpthread -ldl
    mv "$bin.$$" "$bin"
  fi
  say "built $bin in $(($(date +%s) - start)) s"
}

mkdir -p "$out"
bin=""
if [[ -n "${GPU_CHECK_PREBUILT:-}" && $build_only == 0 ]]; then
  # A prebuilt binary that cannot load here (a library it needs is missing
  # or too old) is rebuilt from the sources beside it.
  if [[ -x "$GPU_CHECK_PREBUILT" ]] && ! ldd "$GPU_CHECK_PREBUILT" 2>&1 | grep -q 'not found'; then
    bin="$GPU_CHECK_PREBUILT"
    say "running the prebuilt $bin"
  else
    say "the prebuilt $GPU_CHECK_PREBUILT cannot load here; building from the sources"
    ldd "$GPU_CHECK_PREBUILT" 2>&1 | grep 'not found' | head -5 || true
  fi
fi
if [[ -z "$bin" ]]; then
  build
fi
if ((build_only)); then
  echo "$bin"
  exit 0
fi
# NCCL and the CUDA runtime from pip (torch's, on machines without a system
# copy): distkit's own search (NCCL_HOME, CUDA_HOME, the loader's path,
# /usr/local/cuda) does not look there.
from_pip() {  # variable, soname, directories distkit searches...
  local var="$1" so="$2" d lib
  shift 2
  [[ -z "${!var:-}" ]] || return 0
  for d in "$@"; do [[ -e "$d/$so" ]] && return 0; done
  ldconfig -p 2>/dev/null | grep -qF "$so " && return 0
  lib="$(pip_nvidia_dir "$so")"
  [[ -n "$lib" ]] || return 0
  export "$var=$lib/$so"
  say "$so from pip: $var=$lib/$so"
}
from_pip DISTKIT_NCCL_LIBRARY libnccl.so.2 ${NCCL_HOME:+"$NCCL_HOME/lib"} "$cuda/lib64" \
  "$cuda/lib" /usr/local/cuda/lib64
# The runtime's soname major is the headers' (cuda_library.cc's rule).
cudart_major=$(awk '/#define CUDART_VERSION/ { print int($3 / 1000); exit }' \
  "$cuda/include/cuda_runtime_api.h" /usr/local/cuda/include/cuda_runtime_api.h 2>/dev/null || true)
from_pip DISTKIT_CUDART_LIBRARY "libcudart.so.${cudart_major:-13}" "$cuda/lib64" "$cuda/lib" \
  /usr/local/cuda/lib64
if [[ -n "${DISTKIT_CUDART_LIBRARY:-}" ]]; then
  say "DISTKIT_CUDART_LIBRARY=$DISTKIT_CUDART_LIBRARY DISTKIT_NCCL_LIBRARY=${DISTKIT_NCCL_LIBRARY:-} DKSIM_DEVICES=${DKSIM_DEVICES:-}"
fi

log="$(mktemp "$out/gpu_check.XXXXXX.log")"
trap 'rm -f "$log"' EXIT
# Each part exits 0 (ran, passed), 77 (checked nothing: no GPU) or another
# code (failed); the lines they print are counted below.
set +e
"$bin" 2>&1 | tee -a "$log"
cc_status=${PIPESTATUS[0]}
echo "gpu_check.sh: the Python checks" | tee -a "$log"
if [[ "$cc_status" -eq 77 ]]; then
  # No GPU for the C++ half: none for torch either.
  echo "SKIPPED the Python GPU checks: the C++ half found no usable GPU" | tee -a "$log"
  py_status=77
else
  "$python" tools/gpu_check_python.py 2>&1 | tee -a "$log"
  py_status=${PIPESTATUS[0]}
fi
set -e

passed=$(grep -c '^PASS' "$log" || true)
failed=$(grep -c '^FAIL' "$log" || true)
skipped=$(grep -c '^SKIPPED' "$log" || true)
# Checks that need more GPUs than this machine has: not a fault of the run.
excused=$(grep '^SKIPPED' "$log" | grep -cE 'needs [0-9]+ GPUs, [0-9]+ here' || true)
status=0
for s in "$cc_status" "$py_status"; do
  if [[ "$s" -ne 0 && "$s" -ne 77 ]]; then status=1; fi
done
((failed == 0)) || status=1
if [[ "${GPU_CHECK_REQUIRE:-0}" == 1 ]] && ((excused > 0)); then
  say "GPU_CHECK_REQUIRE=1 allows these SKIPPED, which need more GPUs than this machine has:"
  grep '^SKIPPED' "$log" | grep -E 'needs [0-9]+ GPUs, [0-9]+ here' | sed 's/^/  /'
fi
if [[ "${GPU_CHECK_REQUIRE:-0}" == 1 ]] && ((skipped > excused)); then
  say "GPU_CHECK_REQUIRE=1: these were SKIPPED (only checks that need more GPUs than this machine has may be):"
  grep '^SKIPPED' "$log" | grep -vE 'needs [0-9]+ GPUs, [0-9]+ here' | sed 's/^/  /'
  status=1
fi
if [[ "$status" -eq 0 && "$cc_status" -eq 77 ]]; then
  status=77
  say "SKIPPED: built, but no GPU check could run here (no usable GPU; point DISTKIT_CUDART_LIBRARY and DISTKIT_NCCL_LIBRARY at testing/gpu_sim's libdkgpusim.so for the simulator)"
fi
say "$passed PASS, $failed FAIL, $skipped SKIPPED ($excused of them need more GPUs than this machine has)"
exit "$status"
