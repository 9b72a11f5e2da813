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
# Needs g++ (C++17), Python's headers and DLPack's (distkit.h includes
# <dlpack/dlpack.h>: DLPACK_INCLUDE, else the system's; torch ships one as
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
PY
)"
flags=(-std=c++17 -O2 -fPIC -shared -fvisibility=hidden "-D_GLIBCXX_USE_CXX11_ABI=$cxx11_abi"
  -I "$root" -I "$root/capi/include" -isystem "$python_include")
for d in $torch_includes; do flags+=(-isystem "$d"); done
dlpack="${DLPACK_INCLUDE:-}"
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
g++ "${flags[@]}" -o "$out" \
  "$here"/completion_pool.cc "$here"/cuda_stream.cc "$here"/distkit_work.cc \
  "$here"/dk_api.cc "$here"/process_group_distkit.cc "$here"/module.cc "${libs[@]}"
echo "$out"
