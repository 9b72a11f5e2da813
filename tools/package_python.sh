#!/usr/bin/env bash
# Builds a self-contained Python package directory usable without Bazel:
#
#   tools/package_python.sh /tmp/pkg
#   PYTHONPATH=/tmp/pkg /usr/bin/python3 -c 'from distkit import dist'
#
# It writes OUT/distkit/ (the binding's modules plus libdistkit.so beside
# them). A second argument names an already built libdistkit.so; otherwise it
# is built with Bazel first.
set -euo pipefail
out="${1:?usage: tools/package_python.sh OUT_DIR [LIBDISTKIT_SO]}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib="${2:-}"
if [ -z "$lib" ]; then
  (cd "$root" && tools/bootstrap.sh && bazel build //capi:libdistkit.so >&2)
  lib="$root/bazel-bin/capi/libdistkit.so"
fi
mkdir -p "$out/distkit"
(cd "$root/bindings/python" && find distkit -name '*.py' -exec cp --parents {} "$out/" \;)
cp "$lib" "$out/distkit/libdistkit.so"
chmod -R u+w "$out/distkit"
echo "$out/distkit"
