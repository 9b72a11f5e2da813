#!/usr/bin/env bash
# Builds a self-contained Python package directory usable without Bazel:
#
#   tools/package_python.sh /tmp/pkg
#   PYTHONPATH=/tmp/pkg /usr/bin/python3 -c 'from distkit import dist'
#
# It writes OUT/distkit/ (the binding's modules plus libdistkit.so and the
# torch c10d extension _c10d.so beside them). Further arguments name an
# already built libdistkit.so and _c10d.so; otherwise both are built with
# Bazel first.
set -euo pipefail
out="${1:?usage: tools/package_python.sh OUT_DIR [LIBDISTKIT_SO C10D_SO]}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib="${2:-}"
ext="${3:-}"
if [ -z "$lib" ]; then
  (cd "$root" && tools/bootstrap.sh &&
    bazel build //capi:libdistkit.so //bindings/python/c10d:_c10d.so >&2)
  lib="$root/bazel-bin/capi/libdistkit.so"
  ext="$root/bazel-bin/bindings/python/c10d/_c10d.so"
fi
mkdir -p "$out/distkit"
(cd "$root/bindings/python" && find distkit -name '*.py' -exec cp --parents {} "$out/" \;)
cp "$lib" "$out/distkit/libdistkit.so"
if [ -n "$ext" ]; then cp "$ext" "$out/distkit/_c10d.so"; fi
chmod -R u+w "$out/distkit"
echo "$out/distkit"
