#!/usr/bin/env bash
# Another Bazel workspace brings distkit in with one local_repository and one
# macro call, builds a C program against @distkit//capi and a py_binary
# against @distkit//bindings/python:distkit, and runs both. The README shows
# the same lines (and the .bazelrc line the py_binary needs:
# --incompatible_default_to_explicit_init_py, else the implicit __init__.py
# Bazel puts at @distkit's runfiles root shadows the distkit package).
set -euo pipefail
marker="$1"      # a file at distkit's root (its WORKSPACE), to find the checkout
consumer_c="$2"
distkit_root=$(dirname "$(readlink -f "$marker")")
work="${TEST_TMPDIR:-/tmp}/consumer"
rm -rf "$work"
mkdir -p "$work"
cat > "$work/WORKSPACE" <<WS
workspace(name = "consumer")

local_repository(
    name = "distkit",
    path = "$distkit_root",
)

load("@distkit//third_party:workspace.bzl", "distkit_workspace")

distkit_workspace()
WS
cat > "$work/BUILD.bazel" <<'B'
cc_binary(
    name = "consumer",
    srcs = ["consumer.c"],
    deps = ["@distkit//capi"],
)

py_binary(
    name = "py_consumer",
    srcs = ["py_consumer.py"],
    python_version = "PY3",
    deps = ["@distkit//bindings/python:distkit"],
)
B
cat > "$work/py_consumer.py" <<'PY'
import distkit
from distkit import dist
assert distkit.__file__.endswith("bindings/python/distkit/__init__.py"), distkit.__file__
assert dist.get_world_size() == 1 and not dist.is_distributed()
print("py_binary in the consumer workspace imports", distkit.__file__)
PY
cp "$consumer_c" "$work/consumer.c"
cp "$distkit_root/.bazelrc" "$work/.bazelrc"
cd "$work"
export HOME="${TEST_TMPDIR:-/tmp}"
# One job and no optimization: what is checked is that the workspace
# resolves, builds, links and runs, not how fast the result is; so the nested
# build takes one core beside the other tests instead of the machine alone.
root="${TEST_TMPDIR:-/tmp}/bazel_root"
# The nested server goes away however the test ends (its idle timeout is
# hours).
trap 'bazel --output_user_root="$root" shutdown >/dev/null 2>&1 || true' EXIT
bazel --output_user_root="$root" build --jobs=1 \
  --compilation_mode=fastbuild --spawn_strategy=local //:consumer //:py_consumer 2>&1 | tail -40
bazel-bin/consumer
bazel-bin/py_consumer
