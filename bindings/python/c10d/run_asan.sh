#!/usr/bin/env bash
# The "distkit" torch backend under AddressSanitizer + UndefinedBehaviorSanitizer:
# the extension and libdistkit.so built with --config=asan, loaded into
# Debian's (uninstrumented) Python with the sanitizer runtimes preloaded, and
# the torch backend's multi-rank checks run through distrun (world sizes 2 and
# 3, the standalone, dead-peer and timeout forms at 2). About two minutes on
# 2 cores; not part of the test command (its ASan phase runs Bazel's tests).
#
#   bindings/python/c10d/run_asan.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
bazel build --config=asan //bindings/python/c10d:_c10d.so //capi:libdistkit.so >&2
bazel build //tools/distrun >&2
asan_bin="$(bazel info --config=asan bazel-bin 2>/dev/null)"
distrun="$(bazel info bazel-bin 2>/dev/null)/tools/distrun/distrun"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
run() {  # world size, then the program's arguments
  local n="$1"
  shift
  rm -f "$tmp/torch_init"
  env LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
    ASAN_OPTIONS=detect_leaks=0:alloc_dealloc_mismatch=0:detect_container_overflow=0:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    TEST_TMPDIR="$tmp" PYTHONPATH="$root/bindings/python:$root" \
    DISTKIT_LIBRARY="$asan_bin/capi/libdistkit.so" \
    DISTKIT_C10D_EXTENSION="$asan_bin/bindings/python/c10d/_c10d.so" \
    "$distrun" --nproc-per-node "$n" --master-port 0 --timeout 600 -- /usr/bin/python3 \
    bindings/python/tests/torch_backend_multirank_test.py "$@" 2>&1 |
    grep -v "UserWarning\|warnings.warn"
}
run 2
run 3
run 2 --standalone
run 2 --dead-peer
run 2 --timeout
echo "the torch backend under ASan + UBSan: passed"
