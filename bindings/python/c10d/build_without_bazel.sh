#!/usr/bin/env bash
# Builds distkit._c10d (the "distkit" torch backend) without Bazel, against
# the torch that PYTHON imports: Debian's 1.13 here, or a pip torch 2.x
# (where the extension extends c10d's Backend, torch_base.h; with CUDA,
# DISTKIT_C10D_CUDA makes CUDA operations follow torch's current stream).
#
#   bindings/python/c10d/build_without_bazel.sh OUT.so [PYTHON]
#   DISTKIT_C10D_EXTENSION=OUT.so python -c 'import distkit'   # or copy it
#                                              # beside the package as _c10d.so
#
# Needs g++ (C++17; C++20 for torch 2.x), Python's headers and DLPack's (distkit.h includes
# <dlpack/dlpack.h>: DLPACK_INCLUDE, a bundle's include/, else the system's; torch ships one as
# ATen/dlpack.h, copied aside when no other is found).
set -euo pipefail
out="${1:?usage: build_without_bazel.sh OUT.so [PYTHON]}"
python="${2:-/usr/bin/python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
eval "$("$python" - <<'PY'
import sysconfig
import torch
import torch.utils.cpp_extension as ext
print("torch_includes='%s'" % " ".join(ext.include_paths()))
print("torch_libs='%s'" % " ".join(ext.library_paths()))
print("python_include='%s'" % sysconfig.get_paths()["include"])
print("cxx11_abi=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
print("cuda=%d" % int(torch.version.cuda is not None))
# torch 2.x's newer headers want C++20 (C++17 is enough for 1.13's).
print("std=%s" % ("c++20" if int(torch.__version__.split(".")[0]) >= 2 else "c++17"))
PY
)"
flags=("-std=$std" -O2 -fPIC -shared -fvisibility=hidden "-D_GLIBCXX_USE_CXX11_ABI=$cxx11_abi"
  -I "$root" -I "$root/capi/include" -isystem "$python_include")
for d in $torch_includes; do flags+=(-isystem "$d"); done
dlpack="${DLPACK_INCLUDE:-}"
# tools/gpu_bundle.sh's bundle carries DLPack's headers in include/.
[ -z "$dlpack" ] && [ -f "$root/include/dlpack/dlpack.h" ] && dlpack="$root/include"
if [ -z "$dlpack" ] && [ ! -f /usr/include/dlpack/dlpack.h ]; then
  for d in $torch_includes; do
    if [ -f "$d/ATen/dlpack.h" ]; then
      mkdir -p "$work/dlpack" && cp "$d/ATen/dlpack.h" "$work/dlpack/dlpack.h"
      dlpack="$work"
      break
    fi
  done
fi
[ -n "$dlpack" ] && flags+=(-isystem "$dlpack")
libs=(-ltorch -ltorch_cpu -lc10 -ltorch_python -ldl)
if [ "$cuda" = 1 ]; then
  cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  flags+=(-DDISTKIT_C10D_CUDA -isystem "$cuda_home/include")
  libs+=(-lc10_cuda)
fi
for d in $torch_libs; do libs=(-L "$d" "-Wl,-rpath,$d" "${libs[@]}"); done
# One compiler per unit, in parallel: the units that parse LibTorch's
# headers take most of a minute each.
# At most one per core.
jobs_max=$(nproc 2>/dev/null || echo 2)
pids=()
status=0
for unit in completion_pool cuda_stream distkit_work dk_api process_group_distkit module; do
  if [ "${#pids[@]}" -ge "$jobs_max" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
  g++ "${flags[@]}" -c -o "$work/$unit.o" "$here/$unit.cc" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ "$status" = 0 ] || { echo "build_without_bazel.sh: a unit did not compile" >&2; exit 1; }
g++ "${flags[@]}" -o "$out" "$work"/*.o "${libs[@]}"
echo "$out"
