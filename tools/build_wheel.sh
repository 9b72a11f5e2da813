#!/usr/bin/env bash
# Builds distkit's Python wheel (libdistkit.so and the torch c10d extension
# inside), offline:
#
#   tools/build_wheel.sh [OUT_DIR]        # default: dist/
#   pip install --no-index dist/distkit-*.whl
#
# The wheel is for this platform and Python (cp311, linux x86_64 here).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)"
cd "$root"
tools/bootstrap.sh
bazel build //capi:libdistkit.so //bindings/python/c10d:_c10d.so >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r bindings/python/pyproject.toml bindings/python/setup.py bindings/python/README.md \
  bindings/python/distkit "$work/"
DISTKIT_LIBRARY="$root/bazel-bin/capi/libdistkit.so" \
  DISTKIT_C10D_EXTENSION="$root/bazel-bin/bindings/python/c10d/_c10d.so" \
  /usr/bin/python3 -m pip wheel \
  --no-build-isolation --no-index --no-deps -w "$out" "$work" >&2
ls "$out"/distkit-*.whl
