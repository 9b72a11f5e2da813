#!/usr/bin/env bash
# Packs distkit's GPU checks for a machine with a GPU but none of this one's
# libraries: the GPU machine this project may be lent has CUDA 13, nvcc,
# CMake, NCCL from pip and torch 2.11 on Python 3.12, but no Abseil, Gloo,
# OpenMPI or DLPack, and no Bazel. Under 64 MiB, it holds:
#
#   lib/        libdistkit.so (//capi:libdistkit.so, built here by Bazel) and
#               every shared library it or gpu_check needs that such a machine
#               lacks (ldd: all but glibc, libstdc++, libgcc and CUDA/NCCL)
#   bin/        gpu_check, prebuilt (GPU_BUNDLE_OPT, default -O2)
#   tools/      gpu_check.sh, gpu_check_python.py
#   bindings/python/distkit   the Python package
#   bindings/python/c10d, capi/include   the torch backend's C++ extension's
#               sources and build script (gpu_check_python.py builds it
#               against that machine's torch) and the C ABI's header
#   cc/ testing/cc/ tools/gpu_check.cc, include/ (Abseil, DLPack)
#               the sources and headers gpu_check is built from: gpu_check.sh
#               rebuilds it there when the prebuilt one cannot load
#               (GPU_CHECK_REBUILD=1 forces that)
#   run.sh      the checks with LD_LIBRARY_PATH on lib/: the C++ half, then
#               the Python half with DISTKIT_LIBRARY=lib/libdistkit.so
#
# Usage: build it under dist/ (git ignores it, so it is neither committed
# nor linted as source), then run it on the GPU machine. With the device tool,
# which copies the working tree but not ignored paths, carry it:
#
#   tools/gpu_bundle.sh dist/gpu_bundle
#   run(command="GPU_CHECK_REQUIRE=1 dist/gpu_bundle/run.sh",
#       carry=["dist/gpu_bundle"], timeout_s=...)         # on the GPU machine
#
# (Elsewhere: copy the directory over and run GPU_CHECK_REQUIRE=1 run.sh.)
# run.sh takes gpu_check.sh's variables (GPU_CHECK_QUICK, GPU_CHECK_TIMEOUT_S,
# GPU_CHECK_REQUIRE, ...). With one GPU, GPU_CHECK_REQUIRE=1 passes with the
# multi-rank checks SKIPPED ("needs 2 GPUs, 1 here"); anything else SKIPPED
# there fails it. NCCL and the CUDA runtime come from distkit's search or,
# failing that, pip's nvidia packages (gpu_check.sh); DISTKIT_NCCL_LIBRARY /
# DISTKIT_CUDART_LIBRARY override. Against the simulator, here (tools/gpu_bundle_test.sh does this in
# a clean environment):
#
#   sim=$PWD/bazel-bin/testing/gpu_sim/libdkgpusim.so
#   DISTKIT_CUDART_LIBRARY=$sim DISTKIT_NCCL_LIBRARY=$sim dist/gpu_bundle/run.sh --quick
#
# OUTDIR must be new, empty, or an earlier bundle (replaced).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
dest="$(realpath -m "$1")"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ -e "$dest" && ! -e "$dest/.distkit_gpu_bundle" ]] && [[ -n "$(ls -A "$dest" 2>/dev/null)" ]]; then
  echo "gpu_bundle.sh: $dest exists and is not a bundle; not replacing it" >&2
  exit 2
fi
opt="${GPU_BUNDLE_OPT:-2}"
if [[ "$dest" == "$PWD"/* ]] && ! git check-ignore -q "$dest"; then
  echo "gpu_bundle.sh: warning: $dest is in the working tree and not ignored by git (use dist/...)" >&2
fi

bazel build //capi:libdistkit.so
distkit=bazel-bin/capi/libdistkit.so
gpu_check="$(GPU_CHECK_OPT=$opt tools/gpu_check.sh --build-only | tail -1)"
[[ -x "$gpu_check" ]] || { echo "gpu_bundle.sh: gpu_check was not built" >&2; exit 1; }

rm -rf "$dest"
mkdir -p "$dest"/{lib,bin,tools,include,bindings/python,testing/cc}
touch "$dest/.distkit_gpu_bundle"

# What the GPU machine has already (or must use its own of): glibc,
# the compiler's runtime, CUDA and NCCL.
system_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libutil.so.* | libresolv.so.* | libstdc++.so.* | libgcc_s.so.* | \
      libcuda.so.* | libcudart.so.* | libnccl.so.* | libnvidia*.so*)
      return 0 ;;
  esac
  return 1
}

cp -L "$distkit" "$dest/lib/libdistkit.so"
cp -L "$gpu_check" "$dest/bin/gpu_check"
for f in "$distkit" "$gpu_check"; do
  # ldd lists the whole closure, each library once.
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    system_lib "$name" || cp -L "$path" "$dest/lib/$name"
  done
done

# gpu_check's sources and headers (for a rebuild there), Abseil's and
# DLPack's headers.
for d in cc/core cc/comm cc/group cc/store cc/parallel; do
  find "$d" \( -name '*.h' -o -name '*.cc' \) ! -name '*_test.cc' -print0 |
    xargs -0 cp --parents -t "$dest"
done
cp testing/cc/*.h "$dest/testing/cc/"
# The "distkit" torch backend's C++ extension, built there against that
# machine's torch (gpu_check_python.py does it; torch 2.x is not here).
mkdir -p "$dest/bindings/python/c10d" "$dest/capi/include/distkit"
cp bindings/python/c10d/*.cc bindings/python/c10d/*.h bindings/python/c10d/build_without_bazel.sh \
  "$dest/bindings/python/c10d/"
rm -f "$dest"/bindings/python/c10d/*_test.cc
cp capi/include/distkit/*.h "$dest/capi/include/distkit/"
cp tools/gpu_check.cc tools/gpu_check.sh tools/gpu_check_python.py "$dest/tools/"
cp -r /usr/include/absl /usr/include/dlpack "$dest/include/"
(cd bindings/python && find distkit -name __pycache__ -prune -o -type f -name '*.py' -print0 |
  xargs -0 cp --parents -t "$dest/bindings/python")

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
cat >"$dest/run.sh" <<EOF
#!/usr/bin/env bash
# distkit's GPU checks, bundled by tools/gpu_bundle.sh from commit $commit
# (and the working tree beside it) on $(date -u +%Y-%m-%d). On the GPU
# machine: GPU_CHECK_REQUIRE=1 ./run.sh  (tools/gpu_check.sh's variables
# apply; GPU_CHECK_REBUILD=1 rebuilds gpu_check from the sources here).
set -euo pipefail
here="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
export LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export DISTKIT_LIBRARY="\$here/lib/libdistkit.so"
if [[ "\${GPU_CHECK_REBUILD:-0}" != 1 ]]; then
  export GPU_CHECK_PREBUILT="\$here/bin/gpu_check"
fi
export GPU_CHECK_OUT="\${GPU_CHECK_OUT:-\${TMPDIR:-/tmp}/distkit_gpu_bundle_check}"
exec bash "\$here/tools/gpu_check.sh" "\$@"
EOF
chmod +x "$dest/run.sh" "$dest/tools/gpu_check.sh"

# Self-contained: with only lib/ on the loader's path, everything but the
# system's own libraries resolves into lib/.
bad=$(for f in "$dest/lib/libdistkit.so" "$dest/bin/gpu_check"; do
  LD_LIBRARY_PATH="$dest/lib" ldd "$f" | awk '$2 == "=>" { print $1, $3 }'
done | while read -r name path; do
  system_lib "$name" || [[ "$path" == "$dest/lib/"* ]] || echo "$name => $path"
done)
if [[ -n "$bad" ]]; then
  echo "gpu_bundle.sh: these do not resolve into the bundle:" >&2
  echo "$bad" >&2
  exit 1
fi
bytes=$(du -sb "$dest" | cut -f1)
echo "gpu_bundle.sh: $dest: $(ls "$dest/lib" | wc -l) libraries, $((bytes / 1024)) KiB" \
  "(gpu_check at -O$opt, from $commit)"
if ((bytes >= 64 * 1024 * 1024)); then
  echo "gpu_bundle.sh: the bundle is over 64 MiB" >&2
  exit 1
fi
