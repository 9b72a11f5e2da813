#!/usr/bin/env bash
# Another Bazel workspace brings distkit in with one local_repository and one
# macro call, builds a C program against @distkit//capi, and runs it. The
# README shows the same lines.
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
B
cp "$consumer_c" "$work/consumer.c"
cp "$distkit_root/.bazelrc" "$work/.bazelrc"
cd "$work"
export HOME="${TEST_TMPDIR:-/tmp}"
bazel --output_user_root="${TEST_TMPDIR:-/tmp}/bazel_root" build --jobs=2 \
  --spawn_strategy=local //:consumer 2>&1 | tail -40
bazel-bin/consumer
bazel --output_user_root="${TEST_TMPDIR:-/tmp}/bazel_root" shutdown
